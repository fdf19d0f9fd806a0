"""The kernel cache's store: compiled kernels to and from entries and shortcuts, by key.

`Store.get(key)` answers a compile from the cache and `Store.put(key, kernel)` keeps one, so the
compiler (tilec.compiler) knows no file or format: the bytes are tilec.cache.format's, the files
`Cache`'s. A kernel becomes an entry here (`payload`) and an entry a kernel (`kernel_from`), and a
shortcut's head becomes a kernel whose metadata is read when first asked for.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import native
from ..errors import CacheError
from ..kernel import CompiledKernel, Metadata, Stages
from ..settings import Settings
from .format import (
    Cache,
    Entry,
    Head,
    Shortcut,
    Status,
    decode,
    digest_json,
    file_state,
    first_part,
    rest_checked,
)
from .key import Key

if TYPE_CHECKING:
    from ..backends.base import Backend, Target

# -- a kernel as an entry, and back ------------------------------------------------------------


def payload(kernel: CompiledKernel) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(JSON payload, raw parts) of a kernel's entry: every stage is stored as bytes, text
    stages UTF-8 encoded, so a hit decodes no base64 and parses only the metadata."""
    parts: dict[str, bytes] = {}
    text: list[str] = []
    names = list(kernel.asm)
    # The last stage (what a kernel loads) first: a hit through a shortcut checks the entry's
    # bytes up to its end, and the other stages only when they are asked for.
    for name in names[-1:] + names[:-1]:
        value = kernel.asm[name]
        if isinstance(value, bytes):
            parts[name] = value
        else:
            parts[name] = value.encode()
            text.append(name)
    return {"order": names, "text": text, "metadata": kernel.metadata.to_json()}, parts


def parse_payload(
    payload: Mapping[str, Any],
    parts: Mapping[str, bytes],
    metadata_class: type[Metadata] = Metadata,
    rest: Callable[[], Mapping[str, bytes]] | None = None,
) -> tuple[Mapping[str, Any], Metadata]:
    """(stages, metadata) of an entry. `rest`: where the stages missing from `parts` come from,
    on first access (a hit through a shortcut has checked only the last)."""
    text = payload["text"]
    order = tuple(payload["order"])
    asm = {n: parts[n].decode() if n in text else parts[n] for n in order if n in parts}
    return stages(asm, order, text, rest), metadata_class.from_json(payload["metadata"])


def stages(
    asm: dict[str, Any],
    order: tuple[str, ...],
    text: Sequence[str],
    rest: Callable[[], Mapping[str, bytes]] | None,
) -> Mapping[str, Any]:
    """The stages `order` names, from `asm` (those read) and `rest` (the others, read on first
    access; `text`: those stored UTF-8 encoded)."""
    if len(asm) == len(order):
        return asm
    if rest is None:
        raise KeyError(f"stages missing from the entry: {set(order) - set(asm)}")
    more = rest

    def load() -> dict[str, Any]:
        found = more()
        return {n: found[n].decode() if n in text else found[n] for n in order if n not in asm}

    return Stages(asm, order=order, load=load)


def head(payload: Mapping[str, Any], first: str) -> Head:
    """What a shortcut's head holds, from an entry's payload and the name of its first part."""
    md = payload["metadata"]
    order, text = tuple(payload["order"]), tuple(payload["text"])
    return first, order, text, md["name"], tuple(md["signature"]), tuple(md["param_names"])


def kernel_from(
    entry: Entry,
    key: Key,
    digest: str,
    status: Status,
    rest: Callable[[], Mapping[str, bytes]] | None = None,
) -> CompiledKernel | None:
    """The kernel an entry holds, or None where this tilec cannot read it."""
    backend, target = key.backend_target()
    try:
        asm, md = parse_payload(entry.payload, entry.parts, backend.metadata_class, rest)
        return backend.make_kernel(asm, md, key.opts, digest, status, target, settings=key.settings)
    except (KeyError, TypeError, ValueError):
        return None


# -- the store ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Store:
    """Kernels by key, in `cache`'s files."""

    cache: Cache
    settings: Settings

    def get(self, key: Key) -> CompiledKernel | None:
        """The cached kernel of `key`: through its shortcut where it has a source key (one file,
        no IR printed), else from its entry; None (and `key.status` saying why) for none."""
        if not self.cache.enabled:
            key.status = "disabled"
            return None
        # Through the shortcut: its id and the backend fetched once into locals (a fresh
        # process pays for every Python call on this path).
        quick = key.quick() if key.source_key is not None else None
        if quick is not None:
            backend, target = quick
            sid = key.shortcut_with(backend, target)
            kernel = self._through_shortcut(key, sid, backend, target)
            if kernel is not None:
                return kernel
        entry, key.status = self.cache.get(key.digest)
        if entry is None:
            return None
        kernel = kernel_from(entry, key, key.digest, key.status)
        if kernel is None:
            key.status = "corrupt"
        elif key.source_key is not None:
            self._put_shortcut(key, key.digest, entry.raw)
        return kernel

    def put(self, key: Key, kernel: CompiledKernel) -> None:
        """Keep `kernel` under its key, and its shortcut where `key` has a source key."""
        raw = self.cache.put(kernel.key, *payload(kernel))
        if key.source_key is not None and raw is not None:
            self._put_shortcut(key, kernel.key, raw)

    def _through_shortcut(
        self, key: Key, sid: str, backend: Backend, target: Target
    ) -> CompiledKernel | None:
        read = self.cache.read_shortcut(sid)
        if read is None:
            return None
        # The watched tools unchanged (trusted): the key stands without asking the backend.
        record, trusted = read
        if not trusted and record.base != digest_json(key.base):
            return None
        # The shortcut's digest covered the copy up to the end of its first part (the stage a
        # kernel loads) and its head: with a head, no JSON is parsed.
        rest = functools.partial(self._rest, sid, record)
        kernel = self._head_kernel(key, sid, record, backend, target, rest)
        if kernel is None:
            entry = decode(record.key, record.entry, verify=False, checked=record.hot)
            if entry is not None:
                kernel = kernel_from(entry, key, record.key, "hit", rest)
        if kernel is None:
            return None
        # Same tools, touched: watch their new state. Only from a copy whose other stages are
        # checked now: a new shortcut would digest them afresh, damage included.
        if not trusted and rest_checked(record):
            self._put_shortcut(key, record.key, record.entry)
        return kernel

    def _head_kernel(
        self,
        key: Key,
        sid: str,
        record: Shortcut,
        backend: Backend,
        target: Target,
        rest: Callable[[], Mapping[str, bytes]],
    ) -> CompiledKernel | None:
        """The kernel from a shortcut's head and the copy's first part, with its metadata read
        on first access; None without a head (the JSON line answers then)."""
        if record.head is None:
            return None
        first, order, text, name, types, names = record.head
        data = first_part(record.entry, record.hot)
        if data is None or first not in order:
            return None
        metadata = functools.partial(self._shortcut_metadata, sid, record, backend)
        try:
            asm = stages({first: data.decode() if first in text else data}, order, text, rest)
            return backend.make_kernel(
                asm, metadata, key.opts, record.key, "hit", target, settings=self.settings,
                head=(name, types, names),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None

    def _shortcut_metadata(self, shortcut: str, record: Shortcut, backend: Backend) -> Metadata:
        """A hit's metadata, from the JSON line of the shortcut's copy of the entry (which its
        digest covered). Where this tilec cannot make it, the shortcut is removed, so that the
        next compile reads the entry's own file (or builds the kernel again)."""
        entry = decode(record.key, record.entry, verify=False, checked=record.hot)
        try:
            if entry is None:
                raise ValueError("not an entry")
            md: Metadata = backend.metadata_class.from_json(entry.payload["metadata"])
        except (KeyError, TypeError, ValueError) as exc:
            self.cache.drop_shortcut(shortcut)
            raise CacheError(
                f"the cached metadata of kernel {record.key[:12]} cannot be read ({exc}); the "
                f"shortcut was removed: compile the kernel again to rebuild it"
            ) from None
        return md

    def _rest(self, shortcut: str, record: Shortcut) -> Mapping[str, bytes]:
        """The stages a hit through `shortcut` did not check, checked now: from its copy of the
        entry, or from the entry's own file where the copy is damaged."""
        if rest_checked(record):
            entry = decode(record.key, record.entry, verify=False)
            if entry is not None:
                return entry.parts
        self.cache.drop_shortcut(shortcut)
        own, status = self.cache.get(record.key)
        if own is None:
            raise CacheError(
                f"the cached stages of kernel {record.key[:12]} are damaged (their digest does "
                f"not match) and its own cache entry is {status}; the damaged shortcut was "
                f"removed: compile the kernel again to rebuild them"
            )
        return own.parts

    def _put_shortcut(self, key: Key, digest: str, entry: bytes) -> None:
        """A shortcut to the entry `digest`, watching the backend's tools and tilec's build
        (which holds its LLVM version), with the kernel's head."""
        backend, target = key.backend_target()
        watch = backend.tool_watch(target, key.opts, self.settings)
        if watch is not None:
            watch = [[native.BUILD_INFO, file_state(native.BUILD_INFO)], *watch]
        decoded = decode(digest, entry, verify=False)
        kernel_head = None
        if decoded is not None and decoded.parts:
            with contextlib.suppress(KeyError, TypeError):
                kernel_head = head(decoded.payload, next(iter(decoded.parts)))
        base = digest_json(key.base)
        self.cache.put_shortcut(key.shortcut, digest, base, watch, entry, kernel_head)
