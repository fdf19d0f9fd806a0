"""Python face of the native core: imports it lazily and turns its errors into tilec's."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, TypeVar

from .errors import CompileError, IRError, TargetError, TilecError

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
T = TypeVar("T")


@functools.cache
def core() -> ModuleType:
    try:
        from . import _core
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise TilecError(
            f"tilec's native core (tilec._core) cannot be imported: {exc}. "
            "Build it with `pip install src/compiler` against an LLVM 19 prefix."
        ) from exc
    return _core


def _translate(exc: BaseException) -> TilecError:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) != 4:
        return CompileError(str(exc))
    kind, message, line, column = args
    if kind == "parse" or kind == "verify":
        return IRError(str(message), int(line), int(column))
    if kind in ("target", "usage"):
        return TargetError(str(message))
    return CompileError(str(message))


@contextmanager
def _native_errors() -> Iterator[None]:
    try:
        yield
    except core().CoreError as exc:
        raise _translate(exc) from None


def _call(fn: Callable[[], T]) -> T:
    with _native_errors():
        return fn()


def llvm_version() -> str:
    return str(core().llvm_version())


# Where CMake writes the build's facts; a cache shortcut watches this file (a reinstalled
# tilec changes it) instead of reading it on every hit.
BUILD_INFO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build_info.py")


@functools.cache
def built_llvm_version() -> str:
    """The LLVM version the native core was built against, without loading it: CMake
    writes it into tilec/_build_info.py (a source tree without one asks the core)."""
    # Read as text, not imported: an import costs ~0.1 ms, a third of a cache hit's budget.
    try:
        with open(BUILD_INFO, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return llvm_version()
    # String operations, not a regular expression: compiling one costs a tenth of a millisecond.
    for line in text.splitlines():
        name, _, value = line.partition(" = ")
        if name == "LLVM_VERSION" and len(value) > 2 and value[0] == value[-1] == '"':
            return value[1:-1]
    return llvm_version()


def registered_targets() -> list[str]:
    return list(core().registered_targets())


def host_cpu() -> str:
    """LLVM's name for this machine's processor (e.g. "znver4")."""
    return str(core().host_cpu())


def host_features() -> str:
    """The host processor's features as LLVM spells them ("+avx2,-avx512f,...")."""
    return str(core().host_features())


@dataclass(frozen=True)
class TargetInfo:
    processors: tuple[str, ...]
    features: tuple[str, ...]

    @property
    def ptx_versions(self) -> tuple[int, ...]:
        return tuple(sorted(int(f[3:]) for f in self.features if f.startswith("ptx")))


@functools.cache
def target_info(triple: str = NVPTX_TRIPLE) -> TargetInfo:
    procs, feats = _call(lambda: core().target_info(triple))
    return TargetInfo(tuple(procs), tuple(feats))


@dataclass(frozen=True)
class FunctionInfo:
    name: str
    is_kernel: bool
    is_declaration: bool
    return_type: str
    param_types: tuple[str, ...]
    param_names: tuple[str, ...] = ()  # "" where the IR names none


@dataclass(frozen=True)
class PassDump:
    """The IR after one LLVM pass, for the unit it ran on (module, function, SCC, loop)."""

    pass_name: str
    unit: str
    ir: str


class NativeModule:
    """An LLVM module owned by the native core; close() frees it deterministically."""

    def __init__(self, data: str | bytes, name: str = "<input>") -> None:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        self._mod = _call(lambda: core().Module(raw, name))

    def __enter__(self) -> NativeModule:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._mod.close()

    @property
    def closed(self) -> bool:
        return bool(self._mod.closed)

    def to_text(self) -> str:
        return str(_call(self._mod.to_text))

    def to_bitcode(self) -> bytes:
        return bytes(_call(self._mod.to_bitcode))

    def functions(self) -> list[FunctionInfo]:
        return [
            FunctionInfo(name, kern, decl, ret, tuple(params), tuple(names))
            for name, kern, decl, ret, params, names in _call(self._mod.functions)
        ]

    def verify(self) -> None:
        _call(self._mod.verify)

    def set_target(self, cpu: str, features: str, triple: str = NVPTX_TRIPLE) -> None:
        _call(lambda: self._mod.set_target(triple, cpu, features))

    def set_module_flag(self, key: str, value: int) -> None:
        _call(lambda: self._mod.set_module_flag_i32(key, value))

    def link_internalized(self, path: str) -> list[str]:
        return _call(lambda: self._mod.link_bitcode_internalized(path))

    def optimize(
        self,
        cpu: str,
        features: str,
        level: int,
        triple: str = NVPTX_TRIPLE,
        dump_passes: bool = False,
    ) -> list[PassDump]:
        """O0-O3 with the target machine's pipeline; the IR after each pass if asked."""
        raw = _call(lambda: self._mod.optimize(triple, cpu, features, level, dump_passes))
        return [PassDump(p, u, ir) for p, u, ir in raw]

    def emit_assembly(
        self, cpu: str, features: str, level: int, triple: str = NVPTX_TRIPLE, pic: bool = False
    ) -> str:
        return str(_call(lambda: self._mod.emit_assembly(triple, cpu, features, level, pic)))

    def emit_object(
        self, cpu: str, features: str, level: int, triple: str, pic: bool = False
    ) -> bytes:
        """A relocatable object file for `triple` (pic=True for shared objects)."""
        return bytes(_call(lambda: self._mod.emit_object(triple, cpu, features, level, pic)))

    def specialize(
        self,
        kernel: str,
        new_name: str,
        constants: Sequence[tuple[int, str]] = (),
        multiples: Sequence[tuple[int, int]] = (),
    ) -> None:
        """Add kernel `new_name`: `kernel` with parameters fixed / assumed multiples of k."""
        _call(lambda: self._mod.specialize(kernel, new_name, list(constants), list(multiples)))
