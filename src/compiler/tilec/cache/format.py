"""The kernel cache's bytes and files: entries, shortcuts, heads, their digests, where they live.

One file per key, written to a temp file and moved into place with os.replace, so readers
see either nothing or a whole entry. Nothing is fsync'ed: after a power loss a file may be
left garbled, and its digest then reads it as corrupt, so it is rebuilt. An fsync would make
every cold compile wait for the disk to guard against what the digest guards. An entry is
one header line holding the digest of the rest of the file, then a JSON line (the payload
and the names and sizes of the binary parts), then the parts' raw bytes. A read checks the
digest of the bytes as read (no re-serialising), so a truncated, edited or bit-rotted entry
is reported as corrupt, removed and rebuilt.

Shortcuts (`shortcut/<id[:2]>/<id>`) map what the caller can name without the IR (its source
key, the options, target, settings and versions) to the entry's key, plus what vouches
for the tools the key was made with: the files and directories whose state the backend
named (`Backend.tool_watch`). A hit through a shortcut therefore neither prints the IR
nor asks the backend for its tools; when a watched file changed, the key is made anew.
A shortcut carries a copy of its entry, so that such a hit opens and reads one file:

    tilec-shortcut 4 <digest of what follows, up to the end of the entry's first part>
    <key>
    <digest of the key's other parts (see tilec.cache.key.key_base)>
    <n> <the entry's length> <digest of the entry's bytes after its first n>
    <the kernel's head, or - for none: see below>
    <number of watched paths, or - for none>
    <mtime_ns> <size> <path>            one line per watched path
    <the entry's bytes, as in its own file>

An entry holds its last stage (what a kernel loads) as its first part, so a hit checks the
shortcut's lines, the entry's JSON line and that stage by the first digest, and the other
stages by the second when they are first asked for (`kernel.Stages`). Plain lines and
numbers, no JSON.

The head is what a kernel object needs before its first launch, six fields separated by tabs:
the entry's first part's name, the stages in order, the text stages, the kernel's name, its
parameters' types and their names (lists separated by commas; an empty field, none). With it
a hit parses no JSON at all: the metadata is read from the entry's JSON line when it is first
asked for (`CompiledKernel.metadata`). A kernel whose names a line cannot hold (a tab, a
comma, a newline) gets "-", and its hit parses the JSON line as before.

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

try:
    # The shortcut read, checked and its watched tools stat'ed in one C call (csrc/hit.c);
    # decode_shortcut and same_state below do the same where it was not built.
    from .. import _hit  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a source tree without the extension
    _hit = None

FORMAT = 3
MAGIC = b"tilec-cache 3 "
SHORTCUT_MAGIC = b"tilec-shortcut 4 "
Status = Literal["hit", "miss", "corrupt", "disabled"]
_HEX = frozenset("0123456789abcdef")
_JSON = json.JSONDecoder()


def digest_json(obj: Any) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def digest_bytes(data: bytes | memoryview) -> bytes:
    """The hex digest (as bytes) that entry and shortcut headers hold."""
    if _hit is not None:  # the same digest; hashlib's first use in a process costs more
        digest: bytes = _hit.blake2b_hex(data)
        return digest
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
    """Whether every [path, state] of `watch` still has that state ([-1, -1]: still absent)."""
    # A cache hit keyed by the IR runs this on every watched path: in C where it was built
    # (None: an item it does not read), else as a shortcut's watch list is checked.
    if _hit is not None:
        answer: bool | None = _hit.unchanged(watch)
        if answer is not None:
            return answer
    try:
        return same_state([(path, mtime, size) for path, (mtime, size) in watch])
    except (TypeError, ValueError):
        return False


class Entry(NamedTuple):
    payload: dict[str, Any]
    parts: dict[str, bytes]
    raw: bytes  # the entry's bytes as stored (a shortcut carries a copy)


# (first part, stages in order, text stages, kernel name, parameter types, parameter names)
Head = tuple[str, tuple[str, ...], tuple[str, ...], str, tuple[str, ...], tuple[str, ...]]


class Shortcut(NamedTuple):
    key: str
    base: str
    # (path, mtime_ns, size) of each watched path; None: the tools are not vouched for
    watch: list[tuple[bytes, int, int]] | None
    entry: bytes
    hot: int  # how many of the entry's first bytes the shortcut's digest covers
    rest: bytes  # the digest of the entry's other bytes, checked when they are used
    head: Head | None = None  # what a kernel object needs (see the module's docstring)


def encode_head(head: Head | None) -> bytes:
    """A shortcut's head line; "-" for none, or for names that a line cannot hold."""
    if head is None:
        return b"-"
    first, order, text, name, types, names = head
    # Trailing unnamed parameters are what Signature.from_llvm pads with: left out, so that an
    # empty field stays "no names" and a lone unnamed parameter needs no spelling of its own.
    names = tuple(names)
    while names and not names[-1]:
        names = names[:-1]
    fields = [first, ",".join(order), ",".join(text), name]
    fields += [",".join(types), ",".join(names)]
    if any("\t" in f or "\n" in f for f in fields) or not first or not name:
        return b"-"
    for items in (order, text, types):
        if any(not item or "," in item for item in items):
            return b"-"
    if any("," in item for item in names):
        return b"-"
    return "\t".join(fields).encode()


def decode_head(line: bytes) -> Head | None:
    """The head of `encode_head`'s line; ValueError where it is not one."""
    if line == b"-":
        return None
    fields = line.decode().split("\t")
    if len(fields) != 6:
        raise ValueError("a shortcut's head has six fields")

    def items(field: str) -> tuple[str, ...]:
        return tuple(field.split(",")) if field else ()

    first, order, text, name, types, names = fields
    return first, items(order), items(text), name, items(types), items(names)


def first_part(entry: bytes, hot: int) -> bytes | None:
    """The entry's first part (its bytes up to `hot`, after the JSON line); None where the
    JSON line does not end before `hot`."""
    start = entry.find(b"\n", len(MAGIC) + 65) + 1
    return entry[start:hot] if 0 < start <= hot else None


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


def decode(
    key: str, raw: bytes, *, verify: bool = True, checked: int | None = None
) -> Entry | None:
    """An entry's payload and parts, or None when it is not a whole, unaltered entry for `key`.
    `verify=False` only where the bytes were checked already (the copy in a shortcut);
    `checked`: only its first bytes were, and the parts beyond them are left out."""
    head = len(MAGIC) + 64
    if raw[: len(MAGIC)] != MAGIC or raw[head : head + 1] != b"\n":
        return None
    if verify and digest_bytes(memoryview(raw)[head + 1 :]) != raw[len(MAGIC) : head]:
        return None
    end = raw.find(b"\n", head + 1)
    limit = len(raw) if checked is None else checked
    if end < 0 or end >= limit:
        return None
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
            if offset + int(size) <= limit:
                parts[str(name)] = raw[offset : offset + int(size)]
            offset += int(size)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if offset != len(raw) or not isinstance(payload, dict):
        return None
    return Entry(payload, parts, raw)


def hot_length(entry: bytes) -> int:
    """How many first bytes of an entry hold its header, its JSON line and its first part."""
    end = entry.index(b"\n", len(MAGIC) + 65)
    sizes = json.loads(entry[len(MAGIC) + 65 : end])["parts"]
    return end + 1 + (int(sizes[0][1]) if sizes else 0)


def encode_shortcut(
    key: str, base: str, watch: list[list[Any]] | None, entry: bytes, head: Head | None = None
) -> bytes | None:
    """A shortcut's bytes (see the module's docstring); None for a watch list that a line
    cannot hold (a path with a newline)."""
    hot = hot_length(entry)
    rest_digest = digest_bytes(memoryview(entry)[hot:])
    lines = [key.encode(), base.encode(), b"%d %d %s" % (hot, len(entry), rest_digest)]
    lines.append(encode_head(head))
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
    covered = len(rest) - len(entry) + hot
    return SHORTCUT_MAGIC + digest_bytes(memoryview(rest)[:covered]) + b"\n" + rest


def decode_shortcut(raw: bytes) -> Shortcut | None:
    """A shortcut's fields, or None when the bytes are not a whole, unaltered shortcut (the
    entry's bytes after `hot` are checked only by `rest_checked`, when they are used)."""
    head = len(SHORTCUT_MAGIC) + 64
    if raw[: len(SHORTCUT_MAGIC)] != SHORTCUT_MAGIC or raw[head : head + 1] != b"\n":
        return None
    try:
        _, key, base, split, head_line, count, rest = raw.split(b"\n", 6)
        hot_text, length, rest_digest = split.split(b" ")
        hot = int(hot_text)
        kernel_head = decode_head(head_line)
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
        # A cut or grown file is refused here, without hashing what the digest leaves out.
        if not 0 <= hot <= len(rest) or int(length) != len(rest) or len(rest_digest) != 64:
            return None
        covered = len(raw) - len(rest) + hot
        if digest_bytes(memoryview(raw)[head + 1 : covered]) != raw[len(SHORTCUT_MAGIC) : head]:
            return None
        text_key = key.decode()
        if not _is_key(text_key):
            return None
        return Shortcut(text_key, base.decode(), watch, rest, hot, rest_digest, kernel_head)
    except ValueError:  # a wrong count, number or head, or bytes that are not text
        return None


def rest_checked(record: Shortcut) -> bool:
    """Whether the entry's bytes that a shortcut's own digest does not cover are unaltered."""
    return digest_bytes(memoryview(record.entry)[record.hot :]) == record.rest


def same_state(watch: list[tuple[bytes, int, int]] | list[tuple[str, int, int]]) -> bool:
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
        return Path(self._shortcut_file(shortcut))

    def _shortcut_file(self, shortcut: str) -> str:
        return self._join("shortcut", shortcut[:2], shortcut)

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
        path = self._shortcut_file(shortcut)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            return None
        found = decode_shortcut(raw)
        if found is None:
            self.drop_shortcut(shortcut)
        return found

    def read_shortcut(self, shortcut: str) -> tuple[Shortcut, bool] | None:
        """A shortcut checked by its digest, and whether its watched tools still have the
        state it recorded (False where it records none); None when there is none (a damaged
        one is removed). The C reader returns no watch list: it has compared it already."""
        if not self.enabled:
            return None
        if _hit is None:
            record = self.get_shortcut(shortcut)
            if record is None:
                return None
            return record, record.watch is not None and same_state(record.watch)
        path = self._shortcut_file(shortcut)
        found = _hit.read_shortcut(path)
        if found is None:
            return None
        if found is False:
            self.drop_shortcut(shortcut)
            return None
        key, base, trusted, entry, hot, rest, head = found
        return Shortcut(key, base, None, entry, hot, rest, head), trusted

    def drop_shortcut(self, shortcut: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self._shortcut_file(shortcut))

    def put_shortcut(
        self,
        shortcut: str,
        key: str,
        base: str,
        watch: list[list[Any]] | None,
        entry: bytes,
        head: Head | None = None,
    ) -> None:
        if self.enabled:
            data = encode_shortcut(key, base, watch, entry, head)
            if data is None:
                data = encode_shortcut(key, base, None, entry, head)
            assert data is not None
            self._write(self.shortcut_path(shortcut), data)

    def _write(self, path: Path, data: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:16]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            # A cache that cannot be written only costs a recompile.
            return
