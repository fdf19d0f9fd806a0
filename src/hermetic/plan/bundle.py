"""`hermetic bundle`: every input of a plan in one content-addressed OCI artifact, and the caches fed from one.

The artifact is an OCI image layout holding one manifest (artifactType
application/vnd.hermetic.bundle.v1): its config is the bundle's index (every
entry's role, name, place in the cache, sha256, size), its layers are the
entries themselves: the checkout's data a build reads (recipes/, toolchain/,
src/compiler/, as one deterministic tar, with the recipe's digest in the
index), the pruned source with its pruned.json, the pinned toolchain (its slim
archive, else its wheel), the hash-pinned wheelhouse, the sdists of wheel
recipes and the plan itself. Pushed with `hermetic push`, pulled back by
reference.

Using a bundle changes no build code: it is one more origin of the verified
caches. `feed` checks every blob, unpacks the checkout data and admits each
entry into a fresh cache at the very path the caches look (sources,
toolchains, wheelhouse, sdists, pruned), each by its sha256; the build then
runs against that cache and root with every other origin turned off.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import shutil
import tarfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.build import wheel
from hermetic.core import platforms
from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError
from hermetic.core.log import stderr_log
from hermetic.fetch import prune, sources, toolchain, wheelhouse
from hermetic.model import recipe, requirements, toolchains, wheels
from hermetic.oci.bundle import ROOT_PARTS, Entry, Opened, feed, open_layout
from hermetic.oci.layout import Layout
from hermetic.oci.progress import Progress
from hermetic.oci.registry import make_client
from hermetic.oci.types import MT_MANIFEST, Descriptor, parse_reference, sha256_digest

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings

# never part of a checkout's inputs (the compiler recipe's own exclude list adds its build outputs)
ALWAYS_EXCLUDED = ("__pycache__", "*.pyc", ".git")


# -- collecting the inputs ---------------------------------------------------------------------------------


def _excluded(rel: str, patterns: Sequence[str]) -> bool:
    parts = rel.split("/")
    return any(fnmatch.fnmatch(p, pat) for p in parts for pat in (*ALWAYS_EXCLUDED, *patterns))


def recipe_part(settings: Settings) -> str:
    """The LLVM recipe's directory relative to the checkout (a bundle carries only what lies inside it)."""
    where = settings.llvm_recipe_dir.resolve()
    if not where.is_relative_to(settings.root.resolve()):
        raise UsageError(f"the recipe {where} is outside the checkout {settings.root}",
                         "a bundle carries the checkout's data", "put the recipe under the checkout, or pass --root")
    return where.relative_to(settings.root.resolve()).as_posix()


def root_tar(root: Path, epoch: int, exclude: Sequence[str], extra: Sequence[str] = ()) -> bytes:
    """recipes/, toolchain/, src/compiler/ (and the LLVM recipe where it lies elsewhere in the checkout) as a
    deterministic tar: sorted, times clamped, owned by 0."""
    files: list[str] = []
    for part in dict.fromkeys((*ROOT_PARTS, *extra)):
        base = root / part
        for dirpath, dirs, names in os.walk(base):
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            dirs[:] = sorted(d for d in dirs if not _excluded(f"{rel_dir}/{d}", exclude))
            files += [f"{rel_dir}/{n}" for n in names if not _excluded(f"{rel_dir}/{n}", exclude)
                      and (Path(dirpath) / n).is_file() and not (Path(dirpath) / n).is_symlink()]
    files = list(dict.fromkeys(files))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(files):
            data = (root / rel).read_bytes()
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.uid, info.gid, info.uname, info.gname = len(data), epoch, 0, 0, "", ""
            info.mode = 0o755 if os.access(root / rel, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _cached(path: Path, sha256: str, what: str) -> Path:
    if not path.is_file() or file_sha256(path) != sha256:
        raise UsageError(f"{what} is not in the cache", f"expected {path} with sha256 {sha256}",
                         "run `hermetic fetch` (and `hermetic source prune`) first")
    return path


def collect(settings: Settings, variant_name: str | None, log: Log, with_release: bool = False) -> list[tuple[Entry, Path]]:
    """Every input of the plan for the variant, fetched into the cache first if missing; (entry, file) pairs."""
    rec = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
    variant = recipe.resolve_variant(rec, variant_name or settings.variant)
    arch = settings.arch or platforms.machine_arch()
    tc = toolchains.select(toolchains.load(settings.toolchain_dir), settings.toolchain, settings.glibc, platforms.zig_arch(arch))
    fit, _ = wheels.matching_recipes(settings.recipes_dir, rec.version, rec.default_version, variant.name,
                                    tuple(variant.values("targets")), arch)
    src = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    meta = prune.ensure_pruned(settings.cache_dir, rec, src, variant, log)
    cache = settings.cache_dir
    out: list[tuple[Entry, Path]] = []

    def add(role: str, path: Path, sha: str = "") -> None:
        sha = sha or file_sha256(path)
        rel = path.relative_to(cache).as_posix() if path.is_relative_to(cache) else ""
        out.append((Entry(role, path.name, rel, sha, path.stat().st_size), path))

    pruned = Path(meta["path"])
    add("pruned", _cached(pruned, meta["sha256"], pruned.name), meta["sha256"])
    add("pruned-meta", pruned.with_name("pruned.json"))
    if with_release:
        add("release", src.path, src.archive.sha256)
    if tc.kind != "host":
        add("toolchain", *_toolchain_file(settings, tc, log))
    house = wheelhouse.fetch_wheelhouses(settings, log, fit)
    for req_file in wheels.requirement_files(settings, fit):
        check = requirements.check_wheelhouse(house, requirements.load_requirements(req_file))
        for path in sorted({p for ps in check.found.values() for p in ps} - {p for _, p in out}):
            add("wheelhouse", path)
    for w in fit:
        if w.sdist is not None:
            got = wheel.sdist_fetch(settings, w.sdist, log)
            add("sdist", _cached(got.path, w.sdist.sha256, w.sdist.file), w.sdist.sha256)
    return out


def _toolchain_file(settings: Settings, tc: toolchains.Toolchain, log: Log) -> tuple[Path, str]:
    """The slim archive when the cache has it (smaller), else the wheel (fetched if need be)."""
    if tc.slim is not None:
        slim = toolchain.slim_nearby(settings.cache_dir, tc, settings.mirrors, log)
        if slim is not None:
            return slim, tc.slim.sha256
    toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log)
    return _cached(toolchain.cache_path(settings.cache_dir, tc), tc.sha256, tc.file), tc.sha256


# -- the artifact --------------------------------------------------------------------------------------------


def settings_for(settings: Settings, opened: Opened, where: Path, log: Log) -> Settings:
    """Settings that build from the bundle alone: its root, a cache fed from it, every other origin off."""
    base = where / opened.manifest.digest.split(":")[1][:16]
    root, cache = base / "root", base / "cache"
    if not (base / "fed").is_file():
        shutil.rmtree(base, ignore_errors=True)  # a half-fed bundle of ours: fed again from the start
        feed(opened, root, cache, log)
        (base / "fed").write_text(opened.manifest.digest + "\n")
    return replace(settings, root=root, cache_dir=cache, mirrors=(), use_urls=False, use_apt=False, wheelhouse=None,
                   substitutes=(), llvm_recipe=str(root / opened.llvm_recipe))


def from_bundle(given: str | None, settings: Settings, insecure: bool = False) -> Settings:
    """The settings a command builds with: unchanged without --bundle; else the bundle's root and cache only."""
    if not given:
        return settings
    log = stderr_log(settings.quiet)
    where = settings.work_dir / "bundle"
    path = Path(given)
    if not (path / "oci-layout").is_file():
        if path.exists():
            raise UsageError(f"{path} is not a bundle layout", "it has no oci-layout file", "pass a `hermetic bundle` DIR")
        path = _pull(given, where, insecure, settings.quiet)
    opened = open_layout(path)
    log(f"bundle: {opened.name} {opened.manifest.digest} ({len(opened.entries)} inputs, every blob verified)")
    return settings_for(settings, opened, where, log)


def _pull(text: str, where: Path, insecure: bool, quiet: bool) -> Path:
    """A bundle from a registry into where/pulled-<digest>: manifest, index and every blob, each checked."""
    ref = parse_reference(text)
    client = make_client(ref, insecure=insecure, environ=os.environ, progress=Progress(enabled=not quiet))
    try:
        media_type, body = client.get_manifest(ref.repository, ref.reference)
        digest = sha256_digest(body)
        if (ref.digest and digest != ref.digest) or media_type != MT_MANIFEST:
            raise VerifyError(f"{ref} is not the bundle asked for", f"{media_type} {digest}", "check the reference")
        dest = where / f"pulled-{digest.split(':')[1][:16]}"
        layout = Layout(dest)
        layout.init()
        layout.put_bytes(body)
        manifest = json.loads(body)
        for d in [manifest["config"], *manifest.get("layers", [])]:
            desc = Descriptor.from_json(d, digest)
            if not layout.blob_path(desc.digest).is_file():
                client.fetch_blob(ref.repository, desc, layout.blob_path(desc.digest))
        layout.write_index([Descriptor(MT_MANIFEST, digest, len(body))])
        return dest
    finally:
        client.close()
