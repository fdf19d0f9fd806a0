"""Safe unpacking of image layers, and checking an unpacked tree against its build record.

A layer is hostile until proven otherwise: every member is checked before
anything is created, entries never go through symlinks, and special files are
refused. Symlinks are resolved as a container runtime resolves them (an
absolute target starts at the image's root) and refused when that would climb
out of the root. setuid/setgid bits are cleared with a warning: the files
belong to whoever unpacks them. Everything lands in a temp directory beside
DIR, which replaces DIR only when every layer is in and verified, so a failure
leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.core.errors import UsageError, VerifyError, disk_full
from hermetic.model.record import compare_trees, load_build_record, scan_tree
from hermetic.oci.layer import _DECOMPRESS_ERRORS, _HashingReader, _open_layer, _undecompressable
from hermetic.oci.layout import pick_root, select_manifest

if TYPE_CHECKING:
    from hermetic.model.record import BuildRecord, TreeEntry
    from hermetic.oci.layout import Layout
    from hermetic.oci.types import Descriptor

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


def _hostile(member: str, why: str) -> VerifyError:
    return VerifyError(
        f"refusing layer entry {member!r}",
        why,
        "the image is malformed or hostile; nothing was written. Rebuild it with `hermetic image` or ask its publisher",
    )


def is_root(name: str) -> bool:
    """`.` or `./`: the root itself, as `tar -C root -c .` writes it first."""
    return not name.startswith("/") and not [p for p in name.split("/") if p not in ("", ".")]


def clean_name(name: str) -> str:
    """The member name as a relative path inside the root, or a refusal."""
    if name.startswith("/"):
        raise _hostile(name, "absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        raise _hostile(name, "empty path")
    if ".." in parts:
        raise _hostile(name, "path contains '..'")
    if "\x00" in name:
        raise _hostile(name, "NUL in path")
    return "/".join(parts)


def _inside(rel: str) -> bool:
    norm = posixpath.normpath(rel)
    return norm != ".." and not norm.startswith("../") and not norm.startswith("/")


MAX_LINKS = 40  # as Linux's path walk


def resolve_in_root(root: Path, rel: str) -> str:
    """Where `rel` leads inside root when symlinks are followed as a container runtime follows them:
    an absolute target starts again at root. Raises ValueError when the walk would climb above root
    (on this machine the link would then leave the tree) or meets more than MAX_LINKS links."""
    todo = [p for p in reversed(rel.split("/"))]
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                raise ValueError("it climbs above the root")
            done.pop()
            continue
        here = root.joinpath(*done, part)
        try:
            st = here.lstat()
        except (FileNotFoundError, NotADirectoryError):
            done.append(part)  # dangling from here on: the rest is only words
            continue
        if not stat.S_ISLNK(st.st_mode):
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise ValueError(f"more than {MAX_LINKS} symlinks in a row (a loop)")
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        todo.extend(reversed(target.split("/")))
    return "/".join(done)


class _Extractor:
    def __init__(self, root: Path, shown: Path | None = None) -> None:
        self.root = root
        self.shown = shown or root  # where the user will find the tree, for messages
        self.dir_modes: dict[str, tuple[int, int]] = {}
        self.links: list[str] = []
        self.set_id: list[str] = []  # entries whose setuid/setgid bits were cleared

    def _no_symlink_parents(self, rel: str, member: str) -> None:
        cur = self.root
        for part in rel.split("/")[:-1]:
            cur = cur / part
            try:
                st = cur.lstat()
            except FileNotFoundError:
                return
            if stat.S_ISLNK(st.st_mode):
                raise _hostile(member, f"it would be written through the symlink {cur.relative_to(self.root)}")
            if not stat.S_ISDIR(st.st_mode):
                raise _hostile(member, f"its parent {cur.relative_to(self.root)} is not a directory")

    def _make_parents(self, rel: str) -> None:
        parent = posixpath.dirname(rel)
        if parent:
            (self.root / parent).mkdir(parents=True, exist_ok=True)

    def _clear(self, path: Path) -> None:
        try:
            st = path.lstat()
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()

    def member(self, tar: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        if is_root(m.name):
            if not m.isdir():
                raise _hostile(m.name, "the root of the layer is not a directory")
            return  # the root is made by hermetic, with mode 0755
        rel = clean_name(m.name)
        self._no_symlink_parents(rel, m.name)
        base = posixpath.basename(rel)
        if base.startswith(WHITEOUT):
            self._whiteout(rel, base, m.name)
            return
        if m.ischr() or m.isblk() or m.isfifo():
            raise _hostile(m.name, "device nodes and fifos are not allowed in a layer")
        if m.issym():
            target = m.linkname
            if not target or "\x00" in target:
                raise _hostile(m.name, f"symlink target {target!r} is empty or has a NUL")
            # absolute targets are resolved from the image's root, checked once every layer is in
            if not target.startswith("/") and not _inside(posixpath.join(posixpath.dirname(rel), target)):
                raise _hostile(m.name, f"symlink target {target!r} leaves the root")
        elif m.islnk():
            try:
                target = clean_name(m.linkname)
            except VerifyError as exc:
                raise _hostile(m.name, f"hard link target {m.linkname!r}: {exc.why}") from None
        elif not (m.isreg() or m.isdir()):
            raise _hostile(m.name, f"unsupported entry type {m.type!r}")

        path = self.root / rel
        self._make_parents(rel)
        if m.mode & 0o6000 and not m.issym():
            self.set_id.append(rel)
        mode = m.mode & (0o1777 if m.isdir() else 0o777)  # a directory keeps its sticky bit (tmp/)
        if m.isdir():
            try:
                if not path.is_dir() or path.is_symlink():
                    self._clear(path)
                    path.mkdir(mode=0o700)
            except OSError as exc:
                raise _hostile(m.name, str(exc)) from exc
            self.dir_modes[rel] = (mode, int(m.mtime))
            return
        self._clear(path)
        if m.issym():
            os.symlink(m.linkname, path)
            self.links.append(rel)
        elif m.islnk():
            self._no_symlink_parents(target, m.name)
            src = self.root / target
            try:
                st = src.lstat()
            except FileNotFoundError:
                raise _hostile(m.name, f"hard link target {target!r} does not exist (yet)") from None
            if not stat.S_ISREG(st.st_mode):
                raise _hostile(m.name, f"hard link target {target!r} is not a regular file")
            os.link(src, path, follow_symlinks=False)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                with os.fdopen(fd, "wb") as out:
                    src_f = tar.extractfile(m)
                    if src_f is not None:
                        shutil.copyfileobj(src_f, out, 1 << 20)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:  # the caller removes the whole temp tree
                    raise disk_full(str(self.shown / rel), exc) from exc
                raise
            os.chmod(path, mode)
            os.utime(path, (m.mtime, m.mtime))

    def _whiteout(self, rel: str, base: str, member: str) -> None:
        parent = posixpath.dirname(rel)
        if base == OPAQUE:
            d = self.root / parent if parent else self.root
            if d.is_dir() and not d.is_symlink():
                for child in d.iterdir():
                    self._clear(child)
            return
        victim = posixpath.join(parent, base[len(WHITEOUT) :])
        clean_name(victim)
        self._clear(self.root / victim)

    def finish(self) -> None:
        for rel in self.links:
            p = self.root / rel
            if not p.is_symlink():
                continue
            try:
                resolve_in_root(self.root, rel)
            except ValueError as exc:
                raise _hostile(rel, f"symlink to {os.readlink(p)!r}: {exc}") from None
        for rel in sorted(self.dir_modes, key=lambda r: -r.count("/")):
            mode, mtime = self.dir_modes[rel]
            p = self.root / rel
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, mode | 0o700 if os.geteuid() != 0 else mode)
                os.utime(p, (mtime, mtime))


def extract_layer(
    root: Path, blob: Path, media_type: str, diff_id: str | None, shown: Path | None = None
) -> list[str]:
    """Extract one layer into root, hashing the tar stream and checking it against diff_id; returns the
    entries whose setuid/setgid bits were cleared."""
    ext = _Extractor(root, shown)
    with _open_layer(blob, media_type) as raw:
        reader = _HashingReader(raw)
        try:
            with tarfile.open(fileobj=reader, mode="r|", encoding="utf-8") as tar:  # type: ignore[call-overload]
                for m in tar:
                    ext.member(tar, m)
            reader.drain()
        except _DECOMPRESS_ERRORS as exc:
            raise _undecompressable(blob, media_type, exc) from exc
        except tarfile.TarError as exc:
            raise VerifyError(
                f"layer {blob.name} is not a valid tar stream", str(exc), "pull or rebuild the image"
            ) from exc
    if diff_id is not None and "sha256:" + reader.sha.hexdigest() != diff_id:
        raise VerifyError(
            f"layer {blob.name} does not match its diff_id",
            f"uncompressed digest sha256:{reader.sha.hexdigest()}, config says {diff_id}",
            "the image is damaged or inconsistent; rebuild or pull it again",
        )
    ext.finish()
    return ext.set_id


def check_links(root: Path) -> None:
    """Every symlink of the whole tree, once all layers are in: a later layer may have changed what an
    earlier link goes through."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                rel = path.relative_to(root).as_posix()
                try:
                    resolve_in_root(root, rel)
                except ValueError as exc:
                    raise _hostile(rel, f"symlink to {os.readlink(path)!r}: {exc}") from None


def _set_id_warning(entries: list[str]) -> str:
    shown = ", ".join(entries[:5]) + (f", … ({len(entries)} in all)" if len(entries) > 5 else "")
    return (
        f"warning: cleared the setuid/setgid bits of {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} "
        f"({shown}): hermetic never unpacks set-id files, since they would belong to whoever unpacks them"
    )


def unpack_layout(
    layout: Layout,
    dest: Path,
    ref_name: str | None = None,
    arch: str | None = None,
    progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> Descriptor:
    """Unpack the image's layers into dest atomically; returns the manifest used. `warn` hears of
    what was changed on the way (setuid/setgid bits cleared)."""
    root = pick_root(layout, ref_name)
    manifest = select_manifest(layout, root, arch)
    layout.verify_blob_file(manifest)
    children = layout.children(manifest)
    config = layout.read_json(children[0])
    layers = children[1:]
    diff_ids = _diff_ids(config, len(layers))
    for layer in layers:
        layout.verify_blob_file(layer)
    dest = dest.absolute()
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"{dest} exists and is not a directory", "", "choose another unpack directory")
    if dest.is_dir() and any(dest.iterdir()):
        raise UsageError(
            f"{dest} is not empty", "unpacking replaces the directory as a whole", "pass a new or empty directory"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.unpack-", dir=dest.parent))
    set_id: list[str] = []
    try:
        for layer, diff_id in zip(layers, diff_ids, strict=True):
            if progress:
                progress(f"unpacking {layer.digest[:19]}… ({layer.size / 1e6:.1f} MB)")
            set_id += extract_layer(tmp, layout.blob_path(layer.digest), layer.media_type, diff_id, shown=dest)
        check_links(tmp)
        if set_id and warn is not None:
            warn(_set_id_warning(sorted(set(set_id))))
        os.chmod(tmp, 0o755)
        if dest.is_dir():
            dest.rmdir()
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _diff_ids(config: dict[str, Any], n: int) -> list[str]:
    try:
        ids = [str(d) for d in config["rootfs"]["diff_ids"]]
    except (KeyError, TypeError) as exc:
        raise VerifyError("image config has no rootfs.diff_ids", str(exc), "rebuild the image") from exc
    if len(ids) != n:
        raise VerifyError(
            "image config and manifest disagree", f"{len(ids)} diff_ids for {n} layers", "rebuild the image"
        )
    return ids


def _record_tree(record: BuildRecord) -> tuple[list[TreeEntry], str]:
    return list(record.tree.files), record.prefix.strip("/")


def relative_to_prefix(files: list[TreeEntry], prefix: str) -> list[TreeEntry]:
    """Record entries below the prefix, prefix-relative; records scanned from the install root list
    `usr/lib64/llvm-…/…` (and its parents), others list the prefix's contents directly."""
    if not any(e.path == prefix or e.path.startswith(prefix + "/") for e in files):
        return files
    return [dataclasses.replace(e, path=e.path[len(prefix) + 1 :]) for e in files if e.path.startswith(prefix + "/")]


def verify_tree(directory: Path, record_path: Path) -> list[str]:
    """Differences between an unpacked tree (a rootfs, or the prefix itself) and its build record."""
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory", "", "pass the directory you unpacked into")
    record = load_build_record(record_path)
    expected, prefix = _record_tree(record)
    below = directory / prefix
    base = below if below.is_dir() and not below.is_symlink() else directory
    return compare_trees(relative_to_prefix(expected, prefix), scan_tree(base))
