"""A compile's cache key: the digest naming its entry, and what names its shortcut, made when asked.

The key (SHA-256) holds the IR's sha256 and `base`: the options (the backend's parsed), the
target, tilec's, LLVM's and the backend's versions and the backend's tools. A shortcut is named
by the caller's source key instead of the IR (tilec.cache.store). Each part is computed on
first use only: a hit through a shortcut never prints the IR nor asks the backend for its tools.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import llvmlite.ir

from .. import ir as tir
from .. import native
from ..kernel import CompileOptions, __version__
from ..settings import Settings
from .format import Status, digest_bytes, digest_json

if TYPE_CHECKING:
    from ..backends.base import Backend, Target
    from ..backends.registry import Registry

CACHE_LAYOUT = 5  # bump when payloads or keys change shape


def as_ir(src: str | bytes | llvmlite.ir.Module) -> str | bytes:
    """IR text or bitcode, from what `tilec.compile` takes."""
    if isinstance(src, llvmlite.ir.Module):
        return tir.to_text(src)
    if isinstance(src, (str, bytes, bytearray)):
        return bytes(src) if isinstance(src, bytearray) else src
    raise TypeError(
        f"expected LLVM IR text (str), bitcode (bytes) or a llvmlite.ir.Module, got "
        f"{type(src).__name__}"
    )


def key_base(
    settings: Settings, opts: CompileOptions, backend: Backend, target: Target
) -> dict[str, Any]:
    """Everything the cache key holds except the IR: options, target, versions, tools."""
    return {
        "layout": CACHE_LAYOUT,
        "options": opts.digest(),
        "backend_options": backend.options_digest(opts),
        "target": str(target),
        "tilec": __version__,
        "llvm": native.built_llvm_version(),
        "backend": [backend.name, backend.version, type(backend).__qualname__],
        "tools": backend.cache_key(target, opts, settings),
    }


def digest(src: str | bytes, base: dict[str, Any]) -> str:
    data = src.encode() if isinstance(src, str) else src
    return digest_json({**base, "ir": hashlib.sha256(data).hexdigest()})


def shortcut_id(
    settings: Settings, source_key: str, opts: CompileOptions, backend: Backend, target: Target
) -> str:
    """What names a shortcut: everything of the cache key that needs neither the IR nor the
    tools. The settings that decide which tools are found stand for the tools (the build of
    tilec, with its LLVM version, is watched instead: see Store); the others (the cache's place,
    dumps, disassemblers, the launch path, the C++ compiler) cannot change an entry. A repr,
    not JSON: the options and target are frozen dataclasses of strings, numbers and tuples, and
    one repr of the tuple is the cheapest. Their fields' dicts rather than the objects: a
    dataclass's own repr goes through a recursion guard and a generated function, about ten
    microseconds more the first time in a process. Paths go in as text (a path's repr costs a
    fresh process microseconds each)."""
    s = settings
    ident = (
        CACHE_LAYOUT,
        source_key,
        vars(opts),
        vars(target),
        str(s.ptxas),
        str(s.libdevice),
        str(s.cuda_home),
        s.path,
        tuple(map(str, s.plugin_dirs)),
        s.assembler,
        str(s.nvptxcompiler),
        s.assembler_check,
        __version__,
        backend.name,
        backend.version,
        type(backend).__qualname__,
    )
    return digest_bytes(repr(ident).encode()).decode()


class Key:
    """One compile's key and the way to it. `quick()`: the backend and target named without the
    plugins or the native core (None for a plugin's target); `resolved()`: parsed and checked.
    `status` is what the store found ("miss", "corrupt", "disabled"), for the kernel built then."""

    __slots__ = (
        "_base", "_digest", "_ir", "_quick", "_resolved", "_shortcut", "opts", "registry",
        "settings", "source_key", "src", "status",
    )  # fmt: skip

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        src: str | bytes | llvmlite.ir.Module,
        opts: CompileOptions,
        source_key: str | None = None,
    ) -> None:
        self.settings, self.registry, self.src, self.opts = settings, registry, src, opts
        self.source_key = source_key
        self.status: Status = "miss"
        self._quick: tuple[Backend, Target] | bool | None = False  # False: not asked yet
        self._resolved: tuple[Backend, Target] | None = None
        self._base: dict[str, Any] | None = None
        self._ir: str | bytes | None = None
        self._digest: str | None = None
        self._shortcut: str | None = None

    def quick(self) -> tuple[Backend, Target] | None:
        if self._quick is False:
            self._quick = self.registry.resolve_quick(self.opts.target, self.opts)
        return self._quick  # type: ignore[return-value]

    def resolved(self) -> tuple[Backend, Target]:
        """The backend and the parsed target (TargetError naming what is valid); a key made
        for another quick target is made again for this one."""
        if self._resolved is None:
            self._resolved = self.registry.resolve(self.opts.target, self.opts)
            if self._quick not in (False, None, self._resolved):
                self._base = self._digest = None
            self._quick = self._resolved
        return self._resolved

    def backend_target(self) -> tuple[Backend, Target]:
        return self.quick() or self.resolved()

    @property
    def base(self) -> dict[str, Any]:
        if self._base is None:
            self._base = key_base(self.settings, self.opts, *self.backend_target())
        return self._base

    @property
    def ir(self) -> str | bytes:
        if self._ir is None:
            self._ir = as_ir(self.src)
        return self._ir

    @property
    def digest(self) -> str:
        """The entry's key (the IR printed and hashed)."""
        if self._digest is None:
            self._digest = digest(self.ir, self.base)
        return self._digest

    @property
    def shortcut(self) -> str:
        """The shortcut's id (needs `source_key`)."""
        if self._shortcut is None:
            return self.shortcut_with(*self.backend_target())
        return self._shortcut

    def shortcut_with(self, backend: Backend, target: Target) -> str:
        """`shortcut`, given the backend and target the caller has at hand."""
        assert self.source_key is not None
        self._shortcut = shortcut_id(self.settings, self.source_key, self.opts, backend, target)
        return self._shortcut
