"""The pruned source: a deterministic .tar.xz of what a variant builds, by the recipe's prune rules."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import lzma
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core.errors import SourceError, disk_full
from hermetic.core.log import null_log
from hermetic.fetch.cache import open_verified

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.fetch.sources import CachedArchive
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


def prune(
    source: CachedArchive,
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
