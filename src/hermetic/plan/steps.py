"""What the plan's steps do when they run: resolve inputs (prune, the build's source), test
whether a build is finished, write the image, build the wheel. Planning itself is in plan.py."""

from __future__ import annotations

import json
import lzma
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest.attach import attest_image, attest_wheel
from hermetic.build import llvm, wheel
from hermetic.core.digests import file_sha256
from hermetic.core.errors import SourceError, VerifyError
from hermetic.fetch import cache, prune, sources
from hermetic.model import record
from hermetic.oci.image import spec_from_record, write_image
from hermetic.plan import substitute

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model import recipe
    from hermetic.model.settings import Settings


def pruned_path(settings: Settings, rec: recipe.Recipe, archive: recipe.Archive, variant: recipe.Variant) -> Path:
    key = prune.prune_key(archive, variant, rec.prune)
    return settings.cache_dir / "pruned" / key / f"{rec.pruned_root}-{variant.name}.tar.xz"


def cached_pruned(settings: Settings, rec: recipe.Recipe, variant: recipe.Variant, log: Log) -> dict[str, Any] | None:
    """The variant's pruned archive of either pinned release, verified in the cache, without the release itself
    (a bundle carries only the pruned source); None when neither is there."""
    # the cached release's subset first, as `fetch` then `ensure_pruned` would pick (the record names the release)
    hit = sources.cached(settings.cache_dir, rec)
    for archive in [hit.archive] if hit else rec.archives:
        dest = pruned_path(settings, rec, archive, variant)
        if dest.is_file() and dest.with_name("pruned.json").is_file():
            meta = _pruned_meta(dest.with_name("pruned.json"))
            if meta.get("from", {}).get("sha256") == archive.sha256 and cache.cached_file(dest, meta["sha256"], log):
                return meta | {"path": str(dest)}
    return None


def ensure_pruned(
    settings: Settings, rec: recipe.Recipe, src: sources.CachedArchive, variant: recipe.Variant, log: Log
) -> dict[str, Any]:
    """The pruned archive for the variant, from the cache or written now; returns its description."""
    dest = pruned_path(settings, rec, src.archive, variant)
    meta_path = dest.with_name("pruned.json")
    if dest.is_file() and meta_path.is_file():
        meta = _pruned_meta(meta_path)
        if cache.cached_file(dest, meta["sha256"], log) is not None:
            log(f"prune: {dest.name} already in the cache")
            # the file just verified: pruned.json names where it was written, and a cache copied or reached
            # elsewhere (another user's copy, a mount) would send the build to that path
            return meta | {"path": str(dest)}
    prune.prune(src, rec, variant, dest, log)
    meta = {
        "file": dest.name,
        "path": str(dest),
        "sha256": file_sha256(dest),
        "size": dest.stat().st_size,
        "key": prune.prune_key(src.archive, variant, rec.prune),
        "from": src.as_json(),
        "variant": variant.name,
    }
    record.write_json(meta_path, meta)
    log(f"prune: wrote {dest} ({meta['size'] / 1e6:.1f} MB, sha256 {meta['sha256']})")
    return meta


def _pruned_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SourceError(
            f"{path} is damaged", f"not valid JSON: {exc}", f"remove {path} and prune again (`hermetic source prune`)"
        ) from exc
    try:
        record.PrunedSource.from_json(meta, str(path))  # every field, before a build relies on it
    except VerifyError as exc:
        raise SourceError(f"{path} is damaged", exc.why or exc.what, f"remove {path} and prune again") from exc
    assert isinstance(meta, dict)
    return meta


def _check_archive(path: Path) -> None:
    try:
        with tarfile.open(path, "r:*") as tar:
            for _ in tar:
                pass
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError) as exc:
        raise SourceError(
            f"{path} is not a readable source archive", f"truncated or corrupt: {exc}",
            "copy the archive again (with its pruned.json), or build with --source pruned",
        ) from exc


def build_inputs(
    settings: Settings,
    rec: recipe.Recipe,
    variant: recipe.Variant,
    source: str,
    log: Log,
) -> llvm.BuildInputs:
    """Resolve what the build consumes: `pruned` (default), `full`, or a path to an archive."""
    if source not in ("pruned", "full"):
        path = Path(source).resolve()
        if not path.is_file():
            raise SourceError(f"source archive {path} does not exist", "", "pass an existing .tar.xz")
        meta_path = path.with_name("pruned.json")
        meta = _pruned_meta(meta_path) if meta_path.is_file() else None
        digest = file_sha256(path)
        if meta is None:
            # Nothing vouches for this archive: read it through once so a truncated or damaged
            # file fails here, clearly, rather than deep inside Conan.
            _check_archive(path)
        if meta is not None and meta.get("sha256") != digest:
            raise SourceError(
                f"{path} does not match {meta_path}",
                f"expected sha256 {meta.get('sha256')}, got {digest}",
                "copy the pruned archive and its pruned.json together, or prune again",
            )
        origin = [meta["from"]] if meta else [{"file": path.name, "sha256": digest, "origin": f"path:{path}"}]
        return llvm.BuildInputs(rec, variant, path, digest, tuple(origin), meta, source_mode="path")
    if source == "pruned" and (meta := cached_pruned(settings, rec, variant, log)) is not None:
        return llvm.BuildInputs(rec, variant, Path(meta["path"]), meta["sha256"], (meta["from"],), meta)
    src = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    if source == "full":
        return llvm.BuildInputs(rec, variant, src.path, src.archive.sha256, (src.as_json(),), None, source_mode="full")
    meta = ensure_pruned(settings, rec, src, variant, log)
    return llvm.BuildInputs(rec, variant, Path(meta["path"]), meta["sha256"], (src.as_json(),), meta)


def finished_build(settings: Settings, build_name: str, inputs_digest: str) -> tuple[str | None, str]:
    """(tree digest, "") of an identical earlier build whose tree is still intact, else (None, why not)."""
    path = llvm.build_dir(settings, build_name) / "record.json"
    if llvm.swap_pending(path.parent):
        # Planning changes nothing: the build step finishes or undoes the swap (llvm.recover).
        return None, "an earlier build was cut off while being swapped in"
    if not path.is_file():
        return None, "not built yet"
    rec = record.load_build_record(path)  # a damaged record is an error, never a silent rebuild
    if rec.inputs_digest != inputs_digest:
        return None, "inputs differ from the recorded build"
    root = Path(rec.install_root)
    if not root.is_dir() or record.tree_digest(record.scan_tree(root)) != rec.tree.digest:
        return None, "the recorded tree was changed or removed"
    return rec.tree.digest, ""


def make_wheel(settings: Settings, llvm_prefix: Path, log: Log, recipe_name: str = wheel.DEFAULT_RECIPE) -> None:
    # Planned at run time: the LLVM prefix it checks exists only once the build step ran.
    job = wheel.plan(settings, None, llvm_prefix, None, None, recipe_name=recipe_name, log=log)
    rec = wheel.build_wheel(settings, job, log)
    sbom, prov = attest_wheel(settings, job.output / rec.wheel)
    log(f"wheel: SBOM {sbom.name}, provenance {prov.name}")


def make_image(settings: Settings, record_json: Path, image_dir: Path, log: Log) -> None:
    # Writing the layout takes seconds and is deterministic, so it is always redone
    # rather than trusted from an earlier run; but the image a substitution pulled is kept as it
    # is (its digest is the one published, its attestations were made where it was built).
    spec = spec_from_record(record_json)
    kept = substitute.kept_image(record.load_build_record(record_json), image_dir / spec.name, "gzip")
    if kept is not None:
        log(f"image: {spec.name} {kept.digest} -> {image_dir / spec.name} (pulled from the substitute, kept)")
        return
    result = write_image(spec, image_dir / spec.name)
    log(f"image: {result.name} {result.manifest.digest} -> {result.layout}")
    attest_image(settings, result.layout, record_json)
    log(f"image: SBOM and provenance attached as referrers of {result.manifest.digest}")
