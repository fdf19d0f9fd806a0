"""The AOT description of one compiled kernel: what its C launcher needs, and its JSON."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends.cuda import arch as sm
from ..errors import AotError
from ..kernel import __version__
from ..specialize import Constant
from . import cuda

FORMAT = "tilec-aot/1"
C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_c_name(name: str, what: str) -> None:
    """Refuse names that are no C identifier, or hold "__" (reserved in C++)."""
    if not C_IDENT.match(name) or "__" in name:
        raise AotError(f"{what} {name!r} must be a C identifier without '__'")


@dataclass(frozen=True)
class AotParam:
    name: str
    llvm_type: str

    @property
    def c_type(self) -> str:
        return cuda.c_type(self.llvm_type)

    def decl(self) -> str:
        return f"{self.c_type} {self.name}"


def block_dims(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    dims = [value] if isinstance(value, int) else list(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d >= 1 for d in dims):
        raise AotError(f"{what} must be 1 to 3 positive ints, got {value!r}")
    dims += [1] * (3 - len(dims))
    if dims[0] * dims[1] * dims[2] > 1024:
        raise AotError(f"{what} {tuple(dims)} has more than 1024 threads")
    return dims[0], dims[1], dims[2]


@dataclass(frozen=True)
class AotKernel:
    """One compiled specialization with what its C launcher needs (see `to_json`)."""

    name: str  # the C launcher's name
    entry: str  # the cubin's entry point (the specialization's kernel name)
    kernel: str  # the kernel it was specialized from
    target: str  # "cuda:sm_90"
    arch: str  # "sm_90"
    params: tuple[AotParam, ...]  # the launcher's kernel parameters
    base_params: tuple[AotParam, ...]  # all of the kernel's parameters
    constants: tuple[tuple[str, Constant], ...]  # fixed at compile time (by base param name)
    multiple_of: tuple[tuple[str, int], ...]  # assumed multiples
    block: tuple[int, int, int]
    shared_mem: int
    cubin: bytes
    ptx: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    # -- description -------------------------------------------------------------
    @property
    def arch_number(self) -> tuple[int, bool]:
        """(90, False) for sm_90, (90, True) for sm_90a."""
        try:
            return sm.number(self.arch)
        except ValueError as exc:
            raise AotError(str(exc)) from None

    def conditions(self) -> list[str]:
        return [f"{n} == {v!r}" for n, v in self.constants] + [
            f"{n} % {k} == 0" for n, k in self.multiple_of
        ]

    @property
    def spec_text(self) -> str:
        parts = [f"{n}={v!r}" for n, v in self.constants] + [
            f"{n}%{k}==0" for n, k in self.multiple_of
        ]
        return ",".join(parts) or "generic"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "tilec_version": __version__,
            "name": self.name,
            "entry": self.entry,
            "kernel": self.kernel,
            "target": self.target,
            "arch": self.arch,
            "params": [[p.name, p.llvm_type] for p in self.params],
            "base_params": [[p.name, p.llvm_type] for p in self.base_params],
            "constants": [[n, v] for n, v in self.constants],
            "multiple_of": [[n, k] for n, k in self.multiple_of],
            "block": list(self.block),
            "shared_mem": self.shared_mem,
            "cubin_b64": base64.b64encode(self.cubin).decode(),
            "ptx": self.ptx,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], origin: str = "<json>") -> AotKernel:
        if data.get("format") != FORMAT:
            raise AotError(f"{origin}: not a tilec AOT description (format {data.get('format')!r})")
        try:
            return cls(
                name=str(data["name"]),
                entry=str(data["entry"]),
                kernel=str(data["kernel"]),
                target=str(data["target"]),
                arch=str(data["arch"]),
                params=tuple(AotParam(str(n), str(t)) for n, t in data["params"]),
                base_params=tuple(AotParam(str(n), str(t)) for n, t in data["base_params"]),
                constants=tuple((str(n), v) for n, v in data["constants"]),
                multiple_of=tuple((str(n), int(k)) for n, k in data["multiple_of"]),
                block=block_dims(list(data["block"]), "block"),
                shared_mem=int(data["shared_mem"]),
                cubin=base64.b64decode(data["cubin_b64"]),
                ptx=data.get("ptx"),
                metadata=dict(data.get("metadata") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AotError(f"{origin}: malformed tilec AOT description: {exc!r}") from exc

    @classmethod
    def load(cls, path: str | Path) -> AotKernel:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise AotError(f"cannot read AOT description {p}: {exc}") from exc
        return cls.from_json(data, str(p))

    # -- C -----------------------------------------------------------------------
    def header(self) -> str:
        return cuda.header(self.name, [self], {}, f"tilec aot ({self.target})")

    def source(self) -> str:
        return cuda.source(self.name, f"{self.name}.h", [self], {})

    def write(self, directory: str | Path) -> list[Path]:
        """Write `<name>.h`, `<name>.c` and `<name>.json` (the input of `tilec aot-link`)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        files = {
            out / f"{self.name}.h": self.header(),
            out / f"{self.name}.c": self.source(),
            out / f"{self.name}.json": json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n",
        }
        for path, text in files.items():
            path.write_text(text)
        return list(files)
