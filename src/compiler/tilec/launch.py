"""Kernel signatures, argument packing and launch configs, for every backend (pure Python).

Everything here runs before anything reaches the driver, so a wrong count, type
or range is a TypeError/ValueError with the parameter's position and type.
"""

from __future__ import annotations

import ctypes
import math
import operator
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import LaunchArgumentError, LaunchValueError

_SCALARS: dict[str, tuple[str, type[ctypes._SimpleCData]]] = {  # type: ignore[type-arg]
    "i8": ("int", ctypes.c_uint8),
    "i16": ("int", ctypes.c_uint16),
    "i32": ("int", ctypes.c_uint32),
    "i64": ("int", ctypes.c_uint64),
    "float": ("float", ctypes.c_float),
    "double": ("float", ctypes.c_double),
}
_F32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


@dataclass(frozen=True)
class Param:
    index: int
    llvm_type: str  # "ptr addrspace(1)", "i32", "float", ...
    name: str = ""  # the C name, where the kernel's IR names it

    @property
    def is_pointer(self) -> bool:
        return self.llvm_type == "ptr" or self.llvm_type.startswith("ptr ")

    @property
    def kind(self) -> str:
        """"ptr" for every pointer, else the scalar type: what the native packer is told."""
        return "ptr" if self.is_pointer else self.llvm_type

    def where(self, kernel: str) -> str:
        """How errors name this parameter."""
        named = f" {self.name!r}" if self.name else ""
        return f"kernel {kernel!r} argument {self.index}{named} ({self.llvm_type})"


@dataclass(frozen=True)
class Signature:
    name: str
    params: tuple[Param, ...]

    @classmethod
    def from_llvm(
        cls, name: str, param_types: Sequence[str], param_names: Sequence[str] = ()
    ) -> Signature:
        names = (tuple(param_names) + ("",) * len(param_types))[: len(param_types)]
        # One plain loop: this runs on every cache hit, where each extra function called for
        # the first time in a process (a generator, a property) costs microseconds.
        params: list[Param] = []
        for i, t in enumerate(param_types):
            if not (t == "ptr" or t.startswith("ptr ")) and t not in _SCALARS:
                raise LaunchArgumentError(
                    f"kernel {name!r}: parameter {i} has type {t!r}; "
                    f"supported: ptr, {', '.join(_SCALARS)}"
                )
            params.append(Param(i, t, names[i]))
        return cls(name, tuple(params))

    def __str__(self) -> str:
        return f"{self.name}({', '.join(p.llvm_type for p in self.params)})"


def _scalar(param: Param, value: Any, where: str) -> ctypes._SimpleCData:  # type: ignore[type-arg]
    kind, ctype = _SCALARS[param.llvm_type]
    if kind == "int":
        if isinstance(value, (bool, float)) or not hasattr(value, "__index__"):
            raise LaunchArgumentError(
                f"{where}: expected an integer for {param.llvm_type}, got {type(value).__name__}"
            )
        ivalue = operator.index(value)
        bits = ctypes.sizeof(ctype) * 8
        # LLVM integers carry no sign: accept the signed and the unsigned range.
        if not -(2 ** (bits - 1)) <= ivalue < 2**bits:
            raise LaunchValueError(
                f"{where}: {ivalue} does not fit {param.llvm_type} "
                f"({-(2 ** (bits - 1))}..{2**bits - 1})"
            )
        return ctype(ivalue & (2**bits - 1))
    if isinstance(value, (bool, str, bytes)) or not (
        isinstance(value, (int, float)) or hasattr(value, "__float__")
    ):
        raise LaunchArgumentError(
            f"{where}: expected a number for {param.llvm_type}, got {type(value).__name__}"
        )
    fvalue = float(value)
    if param.llvm_type == "float" and math.isfinite(fvalue) and abs(fvalue) > _F32_MAX:
        raise LaunchValueError(f"{where}: {fvalue} overflows float32")
    return ctype(fvalue)


@dataclass
class PackedArgs:
    """ctypes storage for the arguments plus the void*[] array cuLaunchKernel reads."""

    values: list[ctypes._SimpleCData]  # type: ignore[type-arg]
    array: ctypes.Array[ctypes.c_void_p]

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)

    def to_bytes(self) -> bytes:
        """Each argument's value, in order, without padding: what `Launcher.pack` of the
        native launch path returns for the same arguments."""
        return b"".join(bytes(v) for v in self.values)


def pack_args(
    sig: Signature,
    args: Sequence[Any],
    pointer: Callable[[Any, str], int],
) -> PackedArgs:
    """Check and pack `args` into a `void *[]`; `pointer` turns a pointer argument into an
    address (the backend's: device memory for cuda, host memory for a CPU backend)."""
    if len(args) != len(sig.params):
        raise LaunchArgumentError(
            f"kernel {sig} takes {len(sig.params)} argument(s), got {len(args)}"
        )
    values: list[ctypes._SimpleCData] = []  # type: ignore[type-arg]
    for param, value in zip(sig.params, args, strict=True):
        where = param.where(sig.name)
        if param.is_pointer:
            values.append(ctypes.c_uint64(pointer(value, where)))
        else:
            values.append(_scalar(param, value, where))
    array = (ctypes.c_void_p * max(1, len(values)))()
    for i, v in enumerate(values):
        array[i] = ctypes.addressof(v)
    return PackedArgs(values, array)


Dim3 = tuple[int, int, int]


def dim3(value: Any, what: str, limits: Dim3) -> Dim3:
    if isinstance(value, int) and not isinstance(value, bool):
        dims: tuple[Any, ...] = (value,)
    elif isinstance(value, tuple) and 1 <= len(value) <= 3:
        dims = value
    else:
        raise LaunchArgumentError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    out: list[int] = []
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise LaunchArgumentError(f"{what} must hold ints, got {value!r}")
        out.append(operator.index(d))
    out += [1] * (3 - len(out))
    for axis, (d, lim) in enumerate(zip(out, limits, strict=True)):
        if not 1 <= d <= lim:
            raise LaunchValueError(f"{what}[{axis}] = {d} is outside 1..{lim}")
    return out[0], out[1], out[2]


def launch_config(grid: Any, block: Any) -> tuple[Dim3, Dim3]:
    g = dim3(grid, "grid", (2**31 - 1, 65535, 65535))
    b = dim3(block, "block", (1024, 1024, 64))
    if b[0] * b[1] * b[2] > 1024:
        raise LaunchValueError(f"block {b} has {b[0] * b[1] * b[2]} threads; the limit is 1024")
    return g, b
