"""Kernel specializations: parameters fixed to compile-time constants or known multiples.

A specialization becomes a new kernel in the module (see `NativeModule.specialize`)
whose name carries it, e.g. `vadd__n_1024` or `vadd__n_mul16`, so PTX entries, AOT
launchers and cache entries of different specializations never collide.
"""

from __future__ import annotations

import keyword
import math
import operator
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import CompileError

ParamRef = str | int  # a parameter's IR name, its C name, or its index
Constant = int | float

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}
_F32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
# Names the generated C launchers use for their own parameters and locals.
RESERVED = frozenset(
    {"stream", "grid_x", "grid_y", "grid_z", "args", "rc", "fn", "cc", "ctx", "dev"}
)
_C_KEYWORDS = frozenset(
    [
        "auto",
        "break",
        "case",
        "char",
        "const",
        "continue",
        "default",
        "do",
        "double",
        "else",
        "enum",
        "extern",
        "float",
        "for",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "register",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "typedef",
        "union",
        "unsigned",
        "void",
        "volatile",
        "while",
        "bool",
        "true",
        "false",
        "NULL",
    ]
)


def c_param_names(names: Sequence[str]) -> tuple[str, ...]:
    """C identifiers for the parameters: the IR name where it is one, else `arg<i>`."""
    out: list[str] = []
    for i, name in enumerate(names):
        ok = (
            bool(_IDENT.match(name))
            and name not in _C_KEYWORDS
            and not keyword.iskeyword(name)
            and not name.startswith("__")
        )
        cand = name if ok else f"arg{i}"
        if cand in RESERVED:
            cand += "_"
        while cand in out:
            cand += f"_{i}"
        out.append(cand)
    return tuple(out)


def _fmt_value(value: Constant) -> str:
    text = str(value) if isinstance(value, int) else repr(float(value))
    return text.replace("-", "m").replace("+", "").replace(".", "p")


def _items(
    value: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None,
) -> tuple[tuple[Any, Any], ...]:
    if value is None:
        return ()
    if isinstance(value, Mapping):
        return tuple(value.items())
    return tuple((k, v) for k, v in value)


@dataclass(frozen=True)
class Specialization:
    """What the caller asked for: parameter references, not yet checked against a kernel."""

    constants: tuple[tuple[ParamRef, Constant], ...] = ()
    multiple_of: tuple[tuple[ParamRef, int], ...] = ()

    @classmethod
    def make(
        cls,
        constants: Mapping[ParamRef, Constant] | Iterable[tuple[ParamRef, Constant]] | None = None,
        multiple_of: Mapping[ParamRef, int] | Iterable[tuple[ParamRef, int]] | None = None,
    ) -> Specialization:
        return cls(_items(constants), _items(multiple_of))

    def __bool__(self) -> bool:
        return bool(self.constants or self.multiple_of)

    def resolve(
        self, kernel: str, param_types: Sequence[str], param_names: Sequence[str]
    ) -> ResolvedSpecialization:
        cnames = c_param_names(param_names)

        def index_of(ref: ParamRef, what: str) -> int:
            if isinstance(ref, bool):
                raise CompileError(f"kernel {kernel!r}: {what}: {ref!r} is not a parameter")
            if isinstance(ref, int):
                idx = ref
            elif isinstance(ref, str) and ref.lstrip("#").isdigit() and ref not in param_names:
                idx = int(ref.lstrip("#"))
            elif isinstance(ref, str) and ref in param_names:
                idx = list(param_names).index(ref)
            elif isinstance(ref, str) and ref in cnames:
                idx = cnames.index(ref)
            else:
                raise CompileError(
                    f"kernel {kernel!r} has no parameter {ref!r} ({what}); its parameters: "
                    + ", ".join(f"{n} ({t})" for n, t in zip(cnames, param_types, strict=True))
                )
            if not 0 <= idx < len(param_types):
                raise CompileError(
                    f"kernel {kernel!r} has {len(param_types)} parameter(s); "
                    f"index {idx} does not exist ({what})"
                )
            return idx

        constants: dict[int, Constant] = {}
        for ref, value in self.constants:
            idx = index_of(ref, "constant")
            if idx in constants:
                raise CompileError(f"kernel {kernel!r}: parameter {cnames[idx]} is fixed twice")
            constants[idx] = _check_constant(kernel, cnames[idx], param_types[idx], value)
        multiples: dict[int, int] = {}
        for ref, k in self.multiple_of:
            idx = index_of(ref, "multiple_of")
            where = f"kernel {kernel!r} parameter {cnames[idx]} ({param_types[idx]})"
            if idx in constants:
                raise CompileError(f"{where} is fixed to a constant; it cannot also be a multiple")
            if param_types[idx] not in _INT_BITS:
                raise CompileError(f"{where}: only integer parameters can be multiples of k")
            if isinstance(k, bool) or not isinstance(k, int) or k <= 1:
                raise CompileError(f"{where}: multiple_of needs an integer k > 1, got {k!r}")
            if k >= 2 ** _INT_BITS[param_types[idx]]:
                raise CompileError(f"{where}: {k} does not fit {param_types[idx]}")
            multiples[idx] = k
        return ResolvedSpecialization(
            base=kernel,
            types=tuple(param_types),
            names=cnames,
            constants=tuple(sorted(constants.items())),
            multiples=tuple(sorted(multiples.items())),
        )


def _check_constant(kernel: str, name: str, llvm_type: str, value: Any) -> Constant:
    where = f"kernel {kernel!r} parameter {name} ({llvm_type})"
    if llvm_type in _INT_BITS:
        if isinstance(value, (bool, float)) or not hasattr(value, "__index__"):
            raise CompileError(f"{where}: constant must be an integer, got {value!r}")
        ivalue = operator.index(value)
        bits = _INT_BITS[llvm_type]
        if not -(2 ** (bits - 1)) <= ivalue < 2**bits:
            raise CompileError(f"{where}: {ivalue} does not fit {llvm_type}")
        return ivalue
    if llvm_type in ("float", "double"):
        if isinstance(value, (bool, str, bytes)) or not isinstance(value, (int, float)):
            raise CompileError(f"{where}: constant must be a number, got {value!r}")
        fvalue = float(value)
        if not math.isfinite(fvalue) or (llvm_type == "float" and abs(fvalue) > _F32_MAX):
            raise CompileError(f"{where}: {fvalue} is not a finite {llvm_type}")
        if llvm_type == "float":
            fvalue = struct.unpack("<f", struct.pack("<f", fvalue))[0]  # what the GPU sees
        return fvalue
    raise CompileError(f"{where}: only integer and floating-point parameters can be constants")


@dataclass(frozen=True)
class ResolvedSpecialization:
    """A specialization checked against one kernel's parameters (by index)."""

    base: str
    types: tuple[str, ...]  # LLVM types of all of base's parameters
    names: tuple[str, ...]  # C names of all of base's parameters
    constants: tuple[tuple[int, Constant], ...] = ()
    multiples: tuple[tuple[int, int], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.constants or self.multiples)

    @property
    def kernel_name(self) -> str:
        parts = [f"{self.names[i]}_{_fmt_value(v)}" for i, v in self.constants]
        parts += [f"{self.names[i]}_mul{k}" for i, k in self.multiples]
        return "__".join([self.base, *parts])

    @property
    def kept(self) -> tuple[int, ...]:
        fixed = {i for i, _ in self.constants}
        return tuple(i for i in range(len(self.types)) if i not in fixed)

    def core_constants(self) -> list[tuple[int, str]]:
        """(index, text) as the native core takes them: integers as unsigned bits."""
        out: list[tuple[int, str]] = []
        for i, v in self.constants:
            if self.types[i] in _INT_BITS:
                out.append((i, str(int(v) & (2 ** _INT_BITS[self.types[i]] - 1))))
            else:
                out.append((i, repr(float(v))))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "constants": {self.names[i]: v for i, v in self.constants},
            "multiple_of": {self.names[i]: k for i, k in self.multiples},
        }
