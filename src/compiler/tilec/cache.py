"""Content-addressed on-disk cache of compiled kernels.

One file per key, written to a temp file and moved into place with os.replace, so
readers see either nothing or a whole entry. An entry is one header line holding the
digest of the rest of the file, then a JSON line (the payload and the names and sizes
of the binary parts), then the parts' raw bytes. A read checks the digest of the bytes
as read (no re-serialising), so a truncated, edited or bit-rotted entry is reported as
corrupt, removed and rebuilt.

Shortcuts (`shortcut/<id[:2]>/<id>`) map what the caller can name without the IR (its source
key, the options, target, settings and versions) to the entry's key, plus what vouches
for the tools the key was made with: the files and directories whose state the backend
named (`Backend.tool_watch`). A hit through a shortcut therefore neither prints the IR
nor asks the backend for its tools; when a watched file changed, the key is made anew.
A shortcut carries a copy of its entry, so that such a hit opens and reads one file:

    tilec-shortcut 2 <digest of everything after this line>
    <key>
    <digest of the key's other parts (see Compiler.key_base)>
    <number of watched paths, or - for none>
    <mtime_ns> <size> <path>            one line per watched path
    <the entry's bytes, as in its own file>

Its digest covers the copy, so the copy is checked by the digest of its bytes like the entry
itself. Plain lines and numbers, no JSON: a hit parses one JSON line (the entry's payload).

Digests are BLAKE2b (256 bits), not SHA-256: both come with Python, but hashlib's sha256 is
OpenSSL's, whose first use in a process cost ~50 µs on the dev machine (a sixth of a hit's
budget) against ~10 µs for blake2b; per byte the two are close. Keys stay SHA-256 (made on a
miss, or from the IR).
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
from typing import Any, Literal, NamedTuple

FORMAT = 3
MAGIC = b"tilec-cache 3 "
SHORTCUT_MAGIC = b"tilec-shortcut 2 "
Status = Literal["hit", "miss", "corrupt", "disabled"]
_HEX = frozenset("0123456789abcdef")
_JSON = json.JSONDecoder()


def digest_json(obj: Any) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def digest_bytes(data: bytes | memoryview) -> bytes:
    """The hex digest (as bytes) that entry and shortcut headers hold."""
    return hashlib.blake2b(data, digest_size=32).hexdigest().encode()


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


class Entry(NamedTuple):
    payload: dict[str, Any]
    parts: dict[str, bytes]
    raw: bytes  # the entry's bytes as stored (a shortcut carries a copy)


class Shortcut(NamedTuple):
    key: str
    base: str
    # (path, mtime_ns, size) of each watched path; None: the tools are not vouched for
    watch: list[tuple[bytes, int, int]] | None
    entry: bytes


def encode(key: str, payload: Mapping[str, Any], parts: Mapping[str, bytes]) -> bytes:
    """An entry's bytes: the header (digest of the body), the JSON line, the parts."""
    index = {
        "format": FORMAT,
        "key": key,
        "payload": payload,
        "parts": [[name, len(data)] for name, data in parts.items()],
    }
    body = json.dumps(index, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    body += b"".join(parts.values())
    return MAGIC + digest_bytes(body) + b"\n" + body


def decode(key: str, raw: bytes, *, verify: bool = True) -> Entry | None:
    """An entry's payload and parts, or None when it is not a whole, unaltered entry for `key`.
    `verify=False` only where the bytes were checked already (the copy in a shortcut)."""
    head = len(MAGIC) + 64
    if raw[: len(MAGIC)] != MAGIC or raw[head : head + 1] != b"\n":
        return None
    if verify and digest_bytes(memoryview(raw)[head + 1 :]) != raw[len(MAGIC) : head]:
        return None
    end = raw.find(b"\n", head + 1)
    try:
        # raw_decode rather than json.loads: one Python call instead of four, each costing
        # microseconds the first time in a process.
        text = raw[head + 1 : end].decode()
        index, used = _JSON.raw_decode(text)
        if used != len(text) or type(index) is not dict:
            return None
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
    return Entry(payload, parts, raw)


def encode_shortcut(
    key: str, base: str, watch: list[list[Any]] | None, entry: bytes
) -> bytes | None:
    """A shortcut's bytes (see the module's docstring); None for a watch list that a line
    cannot hold (a path with a newline)."""
    lines = [key.encode(), base.encode()]
    if watch is None:
        lines.append(b"-")
    else:
        lines.append(str(len(watch)).encode())
        for path, (mtime, size) in watch:
            name = os.fsencode(path)
            if b"\n" in name:
                return None
            lines.append(b"%d %d %s" % (int(mtime), int(size), name))
    rest = b"\n".join(lines) + b"\n" + entry
    return SHORTCUT_MAGIC + digest_bytes(rest) + b"\n" + rest


def decode_shortcut(raw: bytes) -> Shortcut | None:
    """A shortcut's fields, or None when the bytes are not a whole, unaltered shortcut."""
    head = len(SHORTCUT_MAGIC) + 64
    if raw[: len(SHORTCUT_MAGIC)] != SHORTCUT_MAGIC or raw[head : head + 1] != b"\n":
        return None
    if digest_bytes(memoryview(raw)[head + 1 :]) != raw[len(SHORTCUT_MAGIC) : head]:
        return None
    try:
        _, key, base, count, rest = raw.split(b"\n", 4)
        watch: list[tuple[bytes, int, int]] | None = None
        if count != b"-":
            n = int(count)
            *lines, rest = rest.split(b"\n", n)
            if len(lines) != n:
                return None
            watch = []
            for line in lines:
                mtime, size, path = line.split(b" ", 2)
                watch.append((path, int(mtime), int(size)))
        text_key = key.decode()
        if not _is_key(text_key):
            return None
        return Shortcut(text_key, base.decode(), watch, rest)
    except ValueError:  # a wrong count or number, or bytes that are not text
        return None


def same_state(watch: list[tuple[bytes, int, int]]) -> bool:
    """Whether every watched path still has its (mtime_ns, size); (-1, -1): still absent."""
    # One loop without temporaries: this runs on every hit through a shortcut.
    stat = os.stat
    for path, mtime, size in watch:
        try:
            st = stat(path)
        except OSError:
            if mtime != -1 or size != -1:
                return False
            continue
        if st.st_mtime_ns != mtime or st.st_size != size:
            return False
    return True


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
        return os.sep.join((os.fspath(self.root), *parts))

    def get(self, key: str) -> tuple[Entry | None, Status]:
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

    def put(self, key: str, payload: Mapping[str, Any], parts: Mapping[str, bytes]) -> bytes | None:
        """Write the entry; returns its bytes (for a shortcut's copy), None when disabled."""
        if not self.enabled:
            return None
        raw = encode(key, payload, parts)
        self._write(self.path(key), raw)
        return raw

    def get_shortcut(self, shortcut: str) -> Shortcut | None:
        """A shortcut, checked by its digest (a damaged one is removed); None when there is
        none. Its entry's copy is decoded by the caller, who knows which key to expect."""
        if not self.enabled:
            return None
        path = self._join("shortcut", shortcut[:2], shortcut)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            return None
        found = decode_shortcut(raw)
        if found is None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return found

    def put_shortcut(
        self, shortcut: str, key: str, base: str, watch: list[list[Any]] | None, entry: bytes
    ) -> None:
        if self.enabled:
            data = encode_shortcut(key, base, watch, entry)
            if data is None:
                data = encode_shortcut(key, base, None, entry)
            assert data is not None
            self._write(self.shortcut_path(shortcut), data)

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
