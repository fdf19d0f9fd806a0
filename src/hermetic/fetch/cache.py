"""The verified cache: files admitted only by their sha256, downloaded beside their place and renamed into it."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from hermetic.core.digests import file_sha256, stream_sha256
from hermetic.core.errors import SourceError, disk_full

if TYPE_CHECKING:
    from hermetic.core.log import Log


def _origin_file(path: Path) -> Path:
    return path.with_name(path.name + ".origin")


@dataclass(frozen=True)
class Mismatch:
    """A file whose content is not what its name or record promises."""

    path: Path
    expected: str
    actual: str
    size: int

    def describe(self) -> str:
        return f"{self.path}: expected sha256 {self.expected}, got {self.actual} ({self.size} bytes)"


def _quiet(msg: str) -> None:
    pass


def _remove_entry(path: Path) -> None:
    path.unlink(missing_ok=True)
    _origin_file(path).unlink(missing_ok=True)
    try:
        path.parent.rmdir()  # the digest directory, once it holds nothing
    except OSError:
        pass


def check_cached_file(path: Path, sha256: str, remove: bool = True) -> Mismatch | None:
    """Hash `path` now; None if it matches `sha256`, else the mismatch (the file removed unless `remove` is False).

    Raises FileNotFoundError when there is no file: callers tell "absent" from "damaged".
    """
    with open(path, "rb") as f:
        actual, size = stream_sha256(f)
    if actual == sha256:
        return None
    if remove:
        _remove_entry(path)
    return Mismatch(path, sha256, actual, size)


def cached_file(path: Path, sha256: str, log: Log = _quiet) -> Path | None:
    """`path` if it exists and its content hashes to `sha256` right now, else None.

    The one check for "a cached file whose sha256 must be X" (source archives,
    pruned archives, the pinned toolchain): a file that differs is removed, with
    a log line naming it and both digests, so the caller fetches or rebuilds it.
    """
    try:
        bad = check_cached_file(path, sha256)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if bad is not None:
        log(f"cache: removed damaged {bad.describe()}")
        return None
    return path


def require_cached_file(path: Path, sha256: str, what: str, fix: str, remove: bool = True) -> Path:
    """`path`, verified against `sha256`; a SourceError naming path and both digests otherwise."""
    try:
        bad = check_cached_file(path, sha256, remove)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise SourceError(f"{what} {path} is missing", str(exc), fix) from exc
    if bad is not None:
        raise SourceError(
            f"{what} {path} does not match its digest",
            f"expected sha256 {bad.expected}, got {bad.actual} ({bad.size} bytes)"
            + ("; the damaged file was removed" if remove else ""),
            fix,
        )
    return path


@contextmanager
def open_verified(path: Path, sha256: str, what: str, fix: str, remove: bool = True) -> Iterator[BinaryIO]:
    """An open file positioned at 0 whose content, read through this very descriptor, hashes to `sha256`.

    Reading the same descriptor that was hashed means a file swapped in at `path`
    after the check is never what gets used.
    """
    try:
        f = open(path, "rb")
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise SourceError(f"{what} {path} is missing", str(exc), fix) from exc
    with f:
        actual, size = stream_sha256(f)
        if actual != sha256:
            if remove:
                _remove_entry(path)
            raise SourceError(
                f"{what} {path} does not match its digest",
                f"expected sha256 {sha256}, got {actual} ({size} bytes)"
                + ("; the damaged file was removed" if remove else ""),
                fix,
            )
        f.seek(0)
        yield f


def admit_file(dest: Path, sha256: str, candidate: Path, origin: str, what: str, move: bool = False) -> Path:
    """Verify `candidate` against `sha256` and place it at `dest` in a content-addressed cache, with a
    note of its origin beside it; refuse it (and leave nothing) if it differs. Sources and toolchains."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    tmp_origin = dest.with_name(f".{dest.name}.{os.getpid()}.origin.partial")
    try:
        if move:
            shutil.move(str(candidate), tmp)
        else:
            shutil.copyfile(candidate, tmp)
        actual = file_sha256(tmp)
        if actual != sha256:
            size = tmp.stat().st_size
            raise SourceError(
                f"{what} from {origin} does not match its pinned digest",
                f"expected sha256 {sha256}, got {actual} ({size} bytes)",
                "the file is tampered, truncated or another release; remove it from that origin "
                "and fetch again (nothing was cached)",
            )
        # the origin note first: a file never sits in the cache without saying where it came from
        tmp_origin.write_text(origin + "\n")
        os.replace(tmp_origin, _origin_file(dest))
        os.replace(tmp, dest)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
        tmp_origin.unlink(missing_ok=True)
        for d in (dest.parent, dest.parent.parent):
            try:
                d.rmdir()  # only succeeds when nothing was admitted
            except OSError:
                pass
    return dest


def download(url: str, part: Path, log: Log, dest: Path) -> bool:
    """`url` into `part` (on its way to `dest`); False (and nothing left) when it cannot be had. A full
    disk is raised, naming `dest`: the next origin would fail the same way."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp, open(part, "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        part.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        log(f"fetch: {url} unreachable ({exc})")
        return False
    return True


def download_verified(url: str, dest: Path, sha256: str, what: str, log: Log) -> Path | None:
    """`url` admitted at the content-addressed `dest` when it hashes to `sha256` (a SourceError when it does not);
    None, leaving nothing, when it cannot be had. Source archives and sdists."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.{os.getpid()}.download")
    log(f"fetch: downloading {url}")
    try:
        ok = download(url, part, log, dest)
    finally:
        if not part.exists():
            with contextlib.suppress(OSError):
                dest.parent.rmdir()  # only when empty: nothing of this attempt stays
    return admit_file(dest, sha256, part, f"url:{url}", what, move=True) if ok else None
