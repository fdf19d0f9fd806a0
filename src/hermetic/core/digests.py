"""sha256 of files and streams: the one implementation every module uses."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20


def stream_sha256(f: BinaryIO) -> tuple[str, int]:
    """Hex sha256 and byte count of everything left in `f`."""
    h = hashlib.sha256()
    size = 0
    while block := f.read(CHUNK):
        h.update(block)
        size += len(block)
    return h.hexdigest(), size


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return stream_sha256(f)[0]
