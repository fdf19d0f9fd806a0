"""Content-addressed on-disk cache of compiled kernels.

One file per key, written to a temp file and moved into place with os.replace, so
readers see either nothing or a whole entry. An entry is one header line holding the
sha256 of the rest of the file, then a JSON line (the payload and the names and sizes
of the binary parts), then the parts' raw bytes. A read checks the digest of the bytes
as read (no re-serialising), so a truncated, edited or bit-rotted entry is reported as
corrupt, removed and rebuilt.

Shortcuts (`shortcut/<digest>`) map what the caller can name without the IR (its source
key, the options, target, settings and versions) to the entry's key, plus what vouches
for the tools the key was made with: the files and directories whose state the backend
named (`Backend.tool_watch`). A hit through a shortcut therefore neither prints the IR
nor asks the backend for its tools; when a watched file changed, the key is made anew.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

FORMAT = 2
MAGIC = b"tilec-cache 2 "
Status = Literal["hit", "miss", "corrupt", "disabled"]
_HEX = frozenset("0123456789abcdef")


def digest_json(obj: Any) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _is_key(text: str) -> bool:
    return len(text) == 64 and _HEX.issuperset(text)


def file_state(path: str) -> list[int]:
    """[mtime_ns, size] of a file or directory; [-1, -1] where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1]
    return [st.st_mtime_ns, st.st_size]


def unchanged(watch: list[list[Any]]) -> bool:
    """Whether every [path, state] of `watch` still has that state."""
    try:
        return all(file_state(path) == list(state) for path, state in watch)
    except (TypeError, ValueError):
        return False


def encode(key: str, payload: Mapping[str, Any], parts: Mapping[str, bytes]) -> bytes:
    """An entry's bytes: the header (sha256 of the body), the JSON line, the parts."""
    index = {
        "format": FORMAT,
        "key": key,
        "payload": payload,
        "parts": [[name, len(data)] for name, data in parts.items()],
    }
    body = json.dumps(index, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    body += b"".join(parts.values())
    return MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def decode(key: str, raw: bytes) -> tuple[dict[str, Any], dict[str, bytes]] | None:
    """(payload, parts) of an entry, or None when it is not a whole, unaltered entry for `key`."""
    head = len(MAGIC) + 64
    if raw[: len(MAGIC)] != MAGIC or raw[head : head + 1] != b"\n":
        return None
    body = memoryview(raw)[head + 1 :]
    if hashlib.sha256(body).hexdigest().encode() != raw[len(MAGIC) : head]:
        return None
    end = raw.find(b"\n", head + 1)
    try:
        index = json.loads(raw[head + 1 : end])
        if index.get("format") != FORMAT or index.get("key") != key:
            return None
        payload = index["payload"]
        parts: dict[str, bytes] = {}
        offset = end + 1
        for name, size in index["parts"]:
            parts[str(name)] = raw[offset : offset + int(size)]
            offset += int(size)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if offset != len(raw) or not isinstance(payload, dict):
        return None
    return payload, parts


@dataclass(frozen=True)
class Cache:
    root: Path
    enabled: bool = True

    # Paths joined as strings: pathlib's first uses in a process cost tens of microseconds,
    # and these are on the path of a cache hit.
    def path(self, key: str) -> Path:
        return Path(self._join(key[:2], f"{key}.tilec"))

    def shortcut_path(self, shortcut: str) -> Path:
        return Path(self._join("shortcut", shortcut[:2], shortcut))

    def _join(self, *parts: str) -> str:
        return os.path.join(os.fspath(self.root), *parts)

    def get(self, key: str) -> tuple[tuple[dict[str, Any], dict[str, bytes]] | None, Status]:
        if not self.enabled:
            return None, "disabled"
        path = self._join(key[:2], f"{key}.tilec")
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None, "miss"
        except OSError:
            return None, "corrupt"
        entry = decode(key, raw)
        if entry is None:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None, "corrupt"
        return entry, "hit"

    def put(self, key: str, payload: Mapping[str, Any], parts: Mapping[str, bytes]) -> None:
        if self.enabled:
            self._write(self.path(key), encode(key, payload, parts))

    def get_shortcut(self, shortcut: str) -> dict[str, Any] | None:
        """A shortcut's record: {"key", "base", "watch"} (the entry itself is checked when it
        is read); None when there is none or it is damaged."""
        if not self.enabled:
            return None
        try:
            with open(self._join("shortcut", shortcut[:2], shortcut), "rb") as f:
                record = json.loads(f.read())
            ok = _is_key(record["key"]) and isinstance(record["base"], str)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return record if ok else None

    def put_shortcut(
        self, shortcut: str, key: str, base: str, watch: list[list[Any]] | None
    ) -> None:
        if self.enabled:
            record = {"key": key, "base": base, "watch": watch}
            self._write(self.shortcut_path(shortcut), json.dumps(record).encode())

    def _write(self, path: Path, data: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:16]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            # A cache that cannot be written only costs a recompile.
            return
