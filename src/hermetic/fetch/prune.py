"""The pruned source: a deterministic .tar.xz of what a variant builds, by the recipe's prune rules."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import lzma
import os
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hermetic.core.digests import file_sha256
from hermetic.core.errors import SourceError, VerifyError, disk_full
from hermetic.core.log import null_log
from hermetic.core.staging import fill_lock
from hermetic.fetch.cache import cached_file, open_verified
from hermetic.model import record

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.recipe import Archive, PruneRules, Recipe, Variant

# The pruning code's version; what is kept is the recipe's data (conandata.yml `prune:`).
PRUNE_RULES_VERSION = 1


def prune_key(archive: Archive, variant: Variant, rules: PruneRules) -> str:
    data = {
        "rules": PRUNE_RULES_VERSION,
        "keep": rules.as_json(),
        "source": archive.sha256,
        "targets": sorted(variant.values("targets")),
        "projects": sorted(variant.values("projects")),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def keep_path(rel: str, targets: set[str], projects: set[str], rules: PruneRules) -> bool:
    """Whether a path (relative to the source root, '/'-separated) belongs to the pruned tree."""
    parts = rel.split("/")
    top = parts[0]
    if len(parts) == 1:
        return False  # loose files at the top (README, .clang-format) are not read by the build
    if any(rel == d or rel.startswith(d + "/") for d in rules.drop_top):
        return False
    if top in rules.keep_top:
        return True
    if top not in projects:
        return False
    if parts[1] in rules.drop_in_project:
        return False
    if top == "llvm" and len(parts) >= 4 and parts[1] == "lib" and parts[2] == "Target":
        target = parts[3]
        if len(parts) == 4 and "." in target:
            return True  # files directly in lib/Target (TargetMachine.cpp, CMakeLists.txt, …)
        if target in targets:
            return True
        return target in rules.td_always and rel.endswith(".td")
    return True


def _normalized(info: tarfile.TarInfo, name: str, epoch: int) -> tarfile.TarInfo:
    out = tarfile.TarInfo(name)
    out.mtime = min(int(info.mtime), epoch)
    out.uid = out.gid = 0
    out.uname = out.gname = ""
    if info.isdir():
        out.type = tarfile.DIRTYPE
        out.mode = 0o755
    elif info.issym():
        out.type = tarfile.SYMTYPE
        out.linkname = info.linkname
        out.mode = 0o777
    else:
        out.type = tarfile.REGTYPE
        out.mode = 0o755 if info.mode & 0o111 else 0o644
    return out


class Source(Protocol):
    """The cached release archive a prune reads: fetch.sources.CachedArchive, which sits beside this module
    (both under plan.resolve), not below it."""

    @property
    def archive(self) -> Archive: ...

    @property
    def path(self) -> Path: ...

    def as_json(self) -> dict[str, str]: ...


def prune(
    source: Source,
    recipe: Recipe,
    variant: Variant,
    dest: Path,
    log: Log = null_log,
) -> Path:
    """Write a deterministic .tar.xz holding only what `variant` builds (the recipe's prune rules); returns its path."""
    epoch = recipe.source_date_epoch
    targets = set(variant.values("targets"))
    projects = set(variant.values("projects"))
    root = recipe.pruned_root
    strip = source.archive.strip_root.rstrip("/") + "/"
    members: dict[str, tuple[tarfile.TarInfo, bytes]] = {}
    log(f"prune: reading {source.path.name} (this takes a minute)")
    # checked again here, on the descriptor tar then reads: the archive was verified at fetch, but a
    # cache entry can change between steps. Only a content-addressed cache entry is removed on mismatch.
    in_cache = source.path.parent.name == source.archive.sha256
    try:
        with (
            open_verified(
                source.path, source.archive.sha256, "source archive",
                "run `hermetic fetch` again (it fetches a verified copy)", remove=in_cache,
            ) as raw_src,
            tarfile.open(fileobj=raw_src, mode="r:*") as tar,
        ):
            for info in tar:
                name = info.name.rstrip("/")
                if not (name + "/").startswith(strip) or name + "/" == strip:
                    continue
                rel = name[len(strip):]
                if info.isdir() or not keep_path(rel, targets, projects, recipe.prune):
                    continue
                if not (info.isfile() or info.issym() or info.islnk()):
                    continue
                data = b""
                if info.isfile() or info.islnk():
                    f = tar.extractfile(info)
                    data = f.read() if f is not None else b""
                    if info.islnk():
                        info = tarfile.TarInfo(info.name)  # hard links become plain copies
                        info.mode = 0o644
                members[rel] = (info, data)
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise SourceError(
            f"cannot read source archive {source.path}",
            str(exc),
            f"delete {source.path.parent} and run `hermetic fetch` again",
        ) from exc
    return write_archive(dest, root, members, epoch, log)


def write_archive(
    dest: Path, root: str, members: Mapping[str, tuple[tarfile.TarInfo, bytes]], epoch: int, log: Log = null_log
) -> Path:
    """Write `members` (paths relative to `root`) as a deterministic .tar.xz: sorted, normalized owners and modes,
    times clamped to `epoch`, every parent directory listed, one fixed xz preset. Written beside `dest`, then moved."""
    dirs: set[str] = set()
    for rel in members:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    log(f"prune: writing {len(members)} files to {dest.name}")
    try:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out:
            top = tarfile.TarInfo(root)
            top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, epoch
            out.addfile(top)
            for rel in sorted(dirs | set(members)):
                if rel in members:
                    info, data = members[rel]
                    norm = _normalized(info, f"{root}/{rel}", epoch)
                    norm.size = len(data) if norm.type == tarfile.REGTYPE else 0
                    out.addfile(norm, io.BytesIO(data) if norm.type == tarfile.REGTYPE else None)
                else:
                    d = tarfile.TarInfo(f"{root}/{rel}")
                    d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, epoch
                    out.addfile(d)
        # Single-threaded xz at a fixed preset: the same tar gives the same bytes.
        with open(tmp, "wb") as f:
            f.write(lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=6))
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    return dest


# -- the pruned archive in the cache -------------------------------------------------------------------------
# CACHE/pruned/<prune key>/<root>-<variant>.tar.xz, with pruned.json beside it (what it was pruned from, its sha256).


def pruned_path(cache_dir: Path, rec: Recipe, archive: Archive, variant: Variant) -> Path:
    key = prune_key(archive, variant, rec.prune)
    return cache_dir / "pruned" / key / f"{rec.pruned_root}-{variant.name}.tar.xz"


def pruned_in_cache(cache_dir: Path, rec: Recipe, variant: Variant, archives: Iterable[Archive]) -> Path | None:
    """The variant's pruned archive of one of `archives`, when it is there (not verified: planning only looks)."""
    for archive in archives:
        path = pruned_path(cache_dir, rec, archive, variant)
        if path.is_file() and path.with_name("pruned.json").is_file():
            return path
    return None


def cached_pruned(
    cache_dir: Path, rec: Recipe, variant: Variant, archives: Iterable[Archive], log: Log
) -> dict[str, Any] | None:
    """The variant's pruned archive of one of `archives`, verified in the cache, without the release itself
    (a bundle carries only the pruned source); None when none is there."""
    for archive in archives:
        dest = pruned_path(cache_dir, rec, archive, variant)
        if dest.is_file() and dest.with_name("pruned.json").is_file():
            meta = pruned_meta(dest.with_name("pruned.json"))
            if meta.get("from", {}).get("sha256") == archive.sha256 and cached_file(dest, meta["sha256"], log):
                return meta | {"path": str(dest)}
    return None


def ensure_pruned(cache_dir: Path, rec: Recipe, src: Source, variant: Variant, log: Log) -> dict[str, Any]:
    """The pruned archive for the variant, from the cache or written now; returns its description."""
    dest = pruned_path(cache_dir, rec, src.archive, variant)
    meta_path = dest.with_name("pruned.json")
    found = _pruned_in_cache(dest, meta_path, log)
    if found is not None:
        return found
    with fill_lock(dest, log):  # another hermetic process may be pruning the same archive
        found = _pruned_in_cache(dest, meta_path, log)
        return found if found is not None else _prune_and_describe(src, rec, variant, dest, meta_path, log)


def _pruned_in_cache(dest: Path, meta_path: Path, log: Log) -> dict[str, Any] | None:
    if dest.is_file() and meta_path.is_file():
        meta = pruned_meta(meta_path)
        if cached_file(dest, meta["sha256"], log) is not None:
            log(f"prune: {dest.name} already in the cache")
            # the file just verified: pruned.json names where it was written, and a cache copied or reached
            # elsewhere (another user's copy, a mount) would send the build to that path
            return meta | {"path": str(dest)}
    return None


def _prune_and_describe(src: Source, rec: Recipe, variant: Variant, dest: Path, meta_path: Path, log: Log) -> dict[str, Any]:
    prune(src, rec, variant, dest, log)
    meta: dict[str, Any] = {
        "file": dest.name,
        "path": str(dest),
        "sha256": file_sha256(dest),
        "size": dest.stat().st_size,
        "key": prune_key(src.archive, variant, rec.prune),
        "from": src.as_json(),
        "variant": variant.name,
    }
    record.write_json(meta_path, meta)
    log(f"prune: wrote {dest} ({meta['size'] / 1e6:.1f} MB, sha256 {meta['sha256']})")
    return meta


def pruned_meta(path: Path) -> dict[str, Any]:
    """A pruned.json, every field checked before a build relies on it."""
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SourceError(
            f"{path} is damaged", f"not valid JSON: {exc}", f"remove {path} and prune again (`hermetic source prune`)"
        ) from exc
    try:
        record.PrunedSource.from_json(meta, str(path))
    except VerifyError as exc:
        raise SourceError(f"{path} is damaged", exc.why or exc.what, f"remove {path} and prune again") from exc
    assert isinstance(meta, dict)
    return meta


def check_archive(path: Path) -> None:
    """Read an archive nothing vouches for through once: a truncated or damaged file fails here, clearly,
    rather than deep inside Conan."""
    try:
        with tarfile.open(path, "r:*") as tar:
            for _ in tar:
                pass
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError) as exc:
        raise SourceError(
            f"{path} is not a readable source archive", f"truncated or corrupt: {exc}",
            "copy the archive again (with its pruned.json), or build with --source pruned",
        ) from exc
