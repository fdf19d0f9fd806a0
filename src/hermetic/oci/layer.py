"""Deterministic tar layers.

The layer is a pure function of the install tree as `record.scan_tree` sees it
(paths, types, modes, link targets, contents) plus SOURCE_DATE_EPOCH: entries
are sorted, every mtime is set to the epoch (the tree digest ignores
timestamps, so the layer must too), owners are 0/0 with empty names, modes are
masked to 0755, and hard links stay links. PAX format is used because it is
what OCI tooling writes and `tarfile` only adds an extended header when a field
does not fit (long paths), which depends on the path alone.

The tar is compressed with gzip (the default) or zstd. The diff_id is the tar's
digest either way, so both images of one tree share their config's rootfs and
differ only in the layer blob and the manifest. zstd output is a function of
the input, the parameters below and the libzstd release (PyPI's `zstandard`,
pinned by version and sha256): a new pin may change the blob digest, never the
diff_id.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

import zstandard

from hermetic.core.errors import UsageError, VerifyError

GZIP_LEVEL = 6
# 19 is the highest level without zstd's "ultra" window sizes: its 8 MiB window
# decodes within every reader's default memory limit. On the support tree
# (reports/oci-zstd-support.json) it is 0.75x gzip's size; levels 20 and 22 were
# 1.2% and 1.6% smaller with a 32 and 128 MiB window, levels 3 and 9 1.35x and 1.15x larger.
ZSTD_LEVEL = 19
COMPRESSIONS = ("gzip", "zstd")
MEDIA_TYPE_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_TYPE_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
MEDIA_TYPE_TAR = "application/vnd.oci.image.layer.v1.tar"


class HashingWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `sink` (if any)."""

    def __init__(self, sink: BinaryIO | None = None) -> None:
        super().__init__()
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        data = bytes(b)
        self.sha.update(data)
        self.size += len(data)
        if self.sink is not None:
            self.sink.write(data)
        return len(data)

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


@dataclass(frozen=True)
class LayerInfo:
    digest: str  # of the compressed blob
    size: int
    diff_id: str  # of the uncompressed tar
    tar_size: int
    media_type: str
    entries: int


def normalized_mode(kind: str, mode: int) -> int:
    if kind == "symlink":
        return 0o777
    return stat.S_IMODE(mode) & 0o755


def check_compression(name: str) -> str:
    if name in COMPRESSIONS:
        return name
    raise UsageError(f"unknown compression {name!r}", "", f"use one of: {', '.join(COMPRESSIONS)}")


def zstd_compressor() -> zstandard.ZstdCompressor:
    """The one zstd configuration layers are written with; every parameter that shapes the frame is fixed.

    One frame, no dictionary; the content checksum (XXH64) on, as the zstd CLI
    does, so a damaged layer fails in the decoder too. The tar is streamed, so
    its size is unknown when the frame header is written: the content size is
    never written (rather than written only when a size happens to be known).
    threads=0 is libzstd's single-threaded path: its worker mode cuts the input
    into jobs and gives other bytes.
    """
    return zstandard.ZstdCompressor(
        level=ZSTD_LEVEL,
        write_checksum=True,
        write_content_size=False,
        write_dict_id=False,
        threads=0,
    )


def compressor_version(compression: str) -> str:
    """What produced the layer's bytes, for reports and rebuild notes."""
    if compression == "zstd":
        return f"zstandard {zstandard.__version__} (libzstd {'.'.join(map(str, zstandard.ZSTD_VERSION))}), level {ZSTD_LEVEL}"
    return f"zlib {zlib.ZLIB_RUNTIME_VERSION}, level {GZIP_LEVEL}"


def _walk(root: Path) -> Iterator[Path]:
    """Every path below root in sorted tar order (a directory before its contents)."""
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        raise VerifyError(f"cannot read {root}", str(exc), "check the install tree") from exc
    for name in names:
        p = root / name
        yield p
        if p.is_dir() and not p.is_symlink():
            yield from _walk(p)


def write_tar(out: BinaryIO, install_root: Path, prefix: str, epoch: int) -> int:
    """Write install_root/prefix as a tar whose member names are `prefix/...`; returns the entry count.

    `prefix` is relative, e.g. "usr/lib64/llvm-support-19.1.7"; its parent
    directories are written as entries too so that any unpacker recreates them.
    """
    prefix = prefix.strip("/")
    top = install_root / prefix
    if not top.is_dir() or top.is_symlink():
        raise VerifyError(
            f"no install tree at {top}",
            f"the layer holds /{prefix}, which must be a directory under {install_root}",
            "build the variant first (`hermetic build llvm`), or pass the right record",
        )
    count = 0
    seen_inodes: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        parts = prefix.split("/")
        for i in range(1, len(parts) + 1):
            name = "/".join(parts[:i])
            st = (install_root / name).lstat()
            info = _info(name, tarfile.DIRTYPE, normalized_mode("dir", st.st_mode) if i == len(parts) else 0o755, epoch)
            tar.addfile(info)
            count += 1
        for path in _walk(top):
            name = path.relative_to(install_root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                info = _info(name, tarfile.SYMTYPE, 0o777, epoch)
                info.linkname = os.readlink(path)
                tar.addfile(info)
            elif stat.S_ISDIR(st.st_mode):
                tar.addfile(_info(name, tarfile.DIRTYPE, normalized_mode("dir", st.st_mode), epoch))
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                mode = normalized_mode("file", st.st_mode)
                if st.st_nlink > 1 and key in seen_inodes:
                    info = _info(name, tarfile.LNKTYPE, mode, epoch)
                    info.linkname = seen_inodes[key]
                    tar.addfile(info)
                else:
                    if st.st_nlink > 1:
                        seen_inodes[key] = name
                    info = _info(name, tarfile.REGTYPE, mode, epoch)
                    info.size = st.st_size
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
            else:
                raise VerifyError(
                    f"cannot put {path} in a layer",
                    "install trees hold only files, directories, symlinks and hard links",
                    "remove the special file from the install tree",
                )
            count += 1
    return count


def _info(name: str, kind: bytes, mode: int, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = int(epoch)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_layer(dest: BinaryIO, install_root: Path, prefix: str, epoch: int, compression: str = "gzip") -> LayerInfo:
    """Write the compressed layer to `dest`, hashing both the blob and the tar (the diff_id)."""
    check_compression(compression)
    blob = HashingWriter(dest)
    if compression == "zstd":
        # closefd=False: the frame is ended on exit, `dest` stays the caller's
        with zstd_compressor().stream_writer(blob, closefd=False) as zw:  # type: ignore[arg-type]
            tar_hash = HashingWriter(zw)
            entries = write_tar(tar_hash, install_root, prefix, epoch)  # type: ignore[arg-type]
        return LayerInfo(blob.digest, blob.size, tar_hash.digest, tar_hash.size, MEDIA_TYPE_ZSTD, entries)
    # filename="" and mtime=0 keep the gzip header free of the path and the clock;
    # the OS byte is always 255 in CPython.
    with gzip.GzipFile(filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=blob, mtime=0) as gz:
        tar_hash = HashingWriter(gz)  # type: ignore[arg-type]
        entries = write_tar(tar_hash, install_root, prefix, epoch)  # type: ignore[arg-type]
    return LayerInfo(blob.digest, blob.size, tar_hash.digest, tar_hash.size, MEDIA_TYPE_GZIP, entries)


class _HashingReader:
    """Reads from `raw` while hashing; tarfile in stream mode only calls read()."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


class _ZstdReader(io.RawIOBase):
    """The concatenated zstd frames of `src`, decompressed; a frame cut short is an error.

    zstandard's stream_reader and read_to_iter end quietly, without checking the
    checksum, when the input stops inside a frame; decompressobj says whether
    its frame reached its end. It returns all the output of what it is given, so
    it is fed small steps: a 4-byte RLE block may expand to 128 KiB, and a
    hostile layer must not make one step allocate gigabytes.
    """

    STEP = 1 << 10  # at most 32 MiB of output per step

    def __init__(self, src: IO[bytes]) -> None:
        super().__init__()
        self._src = src
        self._dctx = zstandard.ZstdDecompressor()
        self._frame: zstandard.ZstdDecompressionObj | None = None
        self._pending = b""
        self._out = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = 0
        while n < len(view):
            if self._pos >= len(self._out) and not self._step():
                break
            k = min(len(view) - n, len(self._out) - self._pos)
            view[n : n + k] = self._out[self._pos : self._pos + k]
            self._pos += k
            n += k
        return n

    def _step(self) -> bool:
        """Decompress the next few compressed bytes; False at the clean end of the last frame."""
        if not self._pending:
            self._pending = self._src.read(self.STEP)
            if not self._pending:
                if self._frame is None:
                    raise zstandard.ZstdError("the layer holds no zstd frame")
                if not self._frame.eof:
                    raise zstandard.ZstdError("the last zstd frame is cut short (truncated layer)")
                return False
        if self._frame is None or self._frame.eof:
            self._frame = self._dctx.decompressobj()
        chunk, self._pending = self._pending[: self.STEP], self._pending[self.STEP :]
        self._out, self._pos = self._frame.decompress(chunk), 0
        if self._frame.eof:  # the next frame starts in what this one did not use
            self._pending = self._frame.unused_data + self._pending
        return True

    def close(self) -> None:
        self._src.close()
        super().close()


def _open_layer(path: Path, media_type: str) -> IO[bytes]:
    if media_type in (MEDIA_TYPE_GZIP, DOCKER_LAYER_GZIP):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if media_type == MEDIA_TYPE_ZSTD:
        return _ZstdReader(open(path, "rb"))  # type: ignore[return-value]
    if media_type == MEDIA_TYPE_TAR:
        return open(path, "rb")
    raise VerifyError(
        f"unsupported layer media type {media_type!r}", "hermetic unpacks tar, tar+gzip and tar+zstd layers", ""
    )


def _undecompressable(blob: Path, media_type: str, exc: BaseException) -> VerifyError:
    return VerifyError(
        f"layer {blob.name} cannot be decompressed",
        f"{media_type}: {exc}",
        "the blob is damaged or not what its media type says: pull or rebuild the image",
    )


def layer_diff_id(blob: Path, media_type: str) -> str:
    """sha256 of the uncompressed layer."""
    h = hashlib.sha256()
    try:
        with _open_layer(blob, media_type) as raw:
            while block := raw.read(1 << 20):
                h.update(block)
    except (OSError, *_DECOMPRESS_ERRORS) as exc:
        raise _undecompressable(blob, media_type, exc) from exc
    return "sha256:" + h.hexdigest()


DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"


# what decompressing a damaged layer raises, besides OSError
_DECOMPRESS_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, zstandard.ZstdError)
