"""Plan first, then execute.

A plan is a list of steps, each with the digest of its inputs; a step whose
digest matches a finished record is skipped. The plan is printed before
anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import llvm, recipe, record, sources
from .digests import file_sha256
from .errors import SourceError
from .log import Log
from .settings import Settings


@dataclass(frozen=True)
class Step:
    name: str
    inputs_digest: str
    done: bool
    detail: str
    run: Callable[[], Any] = field(compare=False, repr=False)


def pruned_path(settings: Settings, rec: recipe.Recipe, archive: recipe.Archive, variant: recipe.Variant) -> Path:
    key = sources.prune_key(archive, variant)
    return settings.cache_dir / "pruned" / key / f"llvm-project-{rec.version}.src-{variant.name}.tar.xz"


def ensure_pruned(
    settings: Settings, rec: recipe.Recipe, src: sources.CachedArchive, variant: recipe.Variant, log: Log
) -> dict[str, Any]:
    """The pruned archive for the variant, from the cache or written now; returns its description."""
    dest = pruned_path(settings, rec, src.archive, variant)
    meta_path = dest.with_name("pruned.json")
    if dest.is_file() and meta_path.is_file():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if file_sha256(dest) == meta.get("sha256"):
            log(f"prune: {dest.name} already in the cache")
            return meta
    sources.prune(src, variant, rec.version, dest, rec.source_date_epoch, log)
    meta = {
        "file": dest.name,
        "path": str(dest),
        "sha256": file_sha256(dest),
        "size": dest.stat().st_size,
        "key": sources.prune_key(src.archive, variant),
        "from": src.as_json(),
        "variant": variant.name,
    }
    record.write_json(meta_path, meta)
    log(f"prune: wrote {dest} ({meta['size'] / 1e6:.1f} MB, sha256 {meta['sha256']})")
    return meta


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
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
        digest = file_sha256(path)
        if meta is not None and meta.get("sha256") != digest:
            raise SourceError(
                f"{path} does not match {meta_path}",
                f"expected sha256 {meta.get('sha256')}, got {digest}",
                "copy the pruned archive and its pruned.json together, or prune again",
            )
        origin = [meta["from"]] if meta else [{"file": path.name, "sha256": digest, "origin": f"path:{path}"}]
        return llvm.BuildInputs(rec, variant, path, digest, tuple(origin), meta)
    src = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    if source == "full":
        return llvm.BuildInputs(rec, variant, src.path, src.archive.sha256, (src.as_json(),), None)
    meta = ensure_pruned(settings, rec, src, variant, log)
    return llvm.BuildInputs(rec, variant, Path(meta["path"]), meta["sha256"], (src.as_json(),), meta)


def finished_build(settings: Settings, inputs: llvm.BuildInputs) -> record.BuildRecord | None:
    """The record of an identical earlier build whose tree is still intact, else None.

    A record that cannot be read is an error (VerifyError), not a reason to rebuild silently.
    """
    path = llvm.build_dir(settings, inputs.variant.name) / "record.json"
    if not path.is_file():
        return None
    rec = record.load_build_record(path)
    if rec.inputs_digest != inputs.digest():
        return None
    root = Path(rec.install_root)
    if not root.is_dir() or record.tree_digest(record.scan_tree(root)) != rec.tree.digest:
        return None
    return rec


def plan_all(settings: Settings, log: Log, source: str = "pruned") -> list[Step]:
    rec = recipe.load(settings.recipes_dir)
    variant = recipe.resolve_variant(rec, settings.variant)
    inputs = build_inputs(settings, rec, variant, source, log)
    from .wheelhouse import fetch_wheelhouse

    fetch_wheelhouse(settings, log)
    prev = finished_build(settings, inputs)
    record_json = llvm.build_dir(settings, variant.name) / "record.json"
    image_dir = settings.work_dir / "images"
    steps = [
        Step("fetch", inputs.sources[0]["sha256"], True, f"{inputs.sources[0]['file']} ({inputs.sources[0]['origin']})", lambda: None),
        Step(
            "prune",
            inputs.pruned["key"] if inputs.pruned else "-",
            True,
            f"{inputs.source_archive.name} sha256 {inputs.source_sha256[:16]}…",
            lambda: None,
        ),
        Step(
            f"build llvm-{variant.name}",
            inputs.digest(),
            prev is not None,
            "up to date: " + prev.tree.digest if prev else f"{settings.jobs} jobs, offline={settings.offline}",
            lambda: llvm.build(settings, inputs, log),
        ),
        Step(
            f"image llvm-{variant.name}",
            inputs.digest(),
            False,
            f"OCI layout under {image_dir}",
            lambda: _image(settings, record_json, image_dir, log),
        ),
        Step(
            "wheel src/compiler",
            inputs.digest(),
            # The compiler core lowers to PTX: a variant without NVPTX cannot host it.
            "NVPTX" not in variant.values("targets"),
            f"tilec against {rec.prefix(variant.name)}, offline"
            if "NVPTX" in variant.values("targets")
            else f"skipped: variant {variant.name} has no NVPTX target",
            lambda: _wheel(settings, llvm.build_dir(settings, variant.name) / "install" / rec.prefix(variant.name).lstrip("/"), log),
        ),
    ]
    return steps


def _wheel(settings: Settings, llvm_prefix: Path, log: Log) -> None:
    from . import wheel

    # Planned at run time: the LLVM prefix it checks exists only once the build step ran.
    from .attest import attest_wheel

    job = wheel.plan(settings, None, llvm_prefix, None, None)
    rec = wheel.build_wheel(settings, job, log)
    sbom, prov = attest_wheel(settings, job.output / rec.wheel)
    log(f"wheel: SBOM {sbom.name}, provenance {prov.name}")


def _image(settings: Settings, record_json: Path, image_dir: Path, log: Log) -> None:
    # Writing the layout takes seconds and is deterministic, so it is always redone
    # rather than trusted from an earlier run.
    from .attest import attest_image
    from .oci.layout import spec_from_record, write_image

    spec = spec_from_record(record_json)
    result = write_image(spec, image_dir / spec.name)
    log(f"image: {result.name} {result.manifest.digest} -> {result.layout}")
    attest_image(settings, result.layout, record_json)
    log(f"image: SBOM and provenance attached as referrers of {result.manifest.digest}")


def render_plan(steps: list[Step]) -> str:
    lines = ["plan:"]
    for i, s in enumerate(steps, 1):
        state = "done" if s.done else "run "
        lines.append(f"  {i}. [{state}] {s.name:<22} inputs {s.inputs_digest[:16]}  {s.detail}")
    return "\n".join(lines)


def execute(steps: list[Step]) -> None:
    for s in steps:
        if not s.done:
            s.run()
