"""A directory filled beside its final place and renamed there in one step.

What is filled is never seen half-written: a failure or an interrupt removes the temporary
directory and leaves whatever was at the final place before; a full disk is a clear error.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from hermetic.core.errors import disk_full


def _replace(tmp: Path, dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)  # an incomplete or stale earlier one
    os.replace(tmp, dest)


@contextmanager
def staged_dir(dest: Path, replace: Callable[[Path, Path], None] = _replace) -> Iterator[Path]:
    """A temporary directory beside `dest`; `replace(tmp, dest)` puts it in place when the block ends
    without error (by default: whatever was at `dest` goes; an image layout passes its own, which
    refuses to replace a directory it did not write)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        yield tmp
        replace(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def fill_lock(dest: Path, log: Callable[[str], None] | None = None) -> Iterator[None]:
    """Held while this process fills `dest`, a place in a cache that other hermetic processes may fill too.

    Two processes that both find `dest` missing would otherwise both fill it, and the second's rename would
    remove the first's tree while a build runs from it. With the lock the second waits, then (callers check
    `dest` again inside) finds it filled and uses it. The lock is a file beside `dest`, removed by its holder
    before it lets go: a waiter that then holds a removed file's lock tries again, so nothing is left in the
    cache. It is only taken for a fill, so a cache that is complete may be read-only.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    path = dest.parent / f".{dest.name}.lock"
    waited = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log is not None and not waited:
                log(f"waiting for another hermetic process that is filling {dest}")
            waited = True
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break  # the lock file that is there now: this process holds it
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed it on the way out: take the one there now
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)


def write_file(tmp: Path, rel: str, src: IO[bytes], executable: bool) -> None:
    """One unpacked file with a fixed mode (0755 or 0644): the umask and the archive's modes do not count."""
    target = tmp / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    os.chmod(target, 0o755 if executable else 0o644)
