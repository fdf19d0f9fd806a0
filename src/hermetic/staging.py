"""A directory filled beside its final place and renamed there in one step.

What is filled is never seen half-written: a failure or an interrupt removes the temporary
directory and leaves whatever was at the final place before; a full disk is a clear error.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import disk_full


@contextmanager
def staged_dir(dest: Path) -> Iterator[Path]:
    """A temporary directory beside `dest`; it replaces `dest` when the block ends without error."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        yield tmp
        shutil.rmtree(dest, ignore_errors=True)  # an incomplete or stale earlier one
        os.replace(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
