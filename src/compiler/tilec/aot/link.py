"""`tilec aot-link`: several AOT kernels in one library, with a dispatcher per kernel."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AotError
from . import cuda
from .kernel import C_IDENT, AotKernel, AotParam, check_c_name


def _specificity(k: AotKernel) -> tuple[int, float, int]:
    return (
        -len(k.constants),
        -sum(math.log2(m) for _, m in k.multiple_of),
        -k.arch_number[0],
    )


@dataclass(frozen=True)
class AotLibrary:
    """Several AOT kernels in one `.c`/`.h`, with one dispatcher per kernel."""

    name: str
    kernels: tuple[AotKernel, ...]
    dispatchers: Mapping[str, tuple[AotKernel, ...]]  # dispatcher name -> most specific first

    def header(self) -> str:
        return cuda.header(self.name, list(self.kernels), self.dispatchers, "tilec aot-link")

    def source(self) -> str:
        return cuda.source(self.name, f"{self.name}.h", list(self.kernels), self.dispatchers)

    def write(self, directory: str | Path) -> list[Path]:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        h, c = out / f"{self.name}.h", out / f"{self.name}.c"
        h.write_text(self.header())
        c.write_text(self.source())
        return [h, c]


def link(
    kernels: Sequence[AotKernel | str | Path],
    name: str,
    dispatch_names: Mapping[str, str] | None = None,
) -> AotLibrary:
    """Combine AOT kernels into one library.

    `dispatch_names` names the dispatchers (kernel -> C name; default: the kernel's name).
    """
    check_c_name(name, "library name")
    loaded = [k if isinstance(k, AotKernel) else AotKernel.load(k) for k in kernels]
    if not loaded:
        raise AotError("aot-link needs at least one AOT kernel")
    seen: dict[str, AotKernel] = {}
    for k in loaded:
        if k.name in seen:
            raise AotError(
                f"two AOT kernels are both named {k.name!r}; rename one (tilec aot --name)"
            )
        seen[k.name] = k
    groups: dict[str, list[AotKernel]] = {}
    for k in loaded:
        groups.setdefault(k.kernel, []).append(k)
    names = dict(dispatch_names or {})
    unknown = set(names) - set(groups)
    if unknown:
        raise AotError(f"no AOT kernel made from {sorted(unknown)}; kernels: {sorted(groups)}")
    dispatchers: dict[str, tuple[AotKernel, ...]] = {}
    for base, group in groups.items():
        first = group[0]
        for other in group[1:]:
            if other.base_params != first.base_params:
                raise AotError(
                    f"specializations of {base!r} disagree on its parameters: {first.name} has "
                    f"({_plist(first.base_params)}), {other.name} has ({_plist(other.base_params)})"
                )
            if other.block != first.block or other.shared_mem != first.shared_mem:
                raise AotError(
                    f"specializations of {base!r} must share block and dynamic shared memory "
                    "(the caller sizes the grid): "
                    f"{first.name} has {first.block}/{first.shared_mem}, "
                    f"{other.name} has {other.block}/{other.shared_mem}"
                )
        keys: dict[tuple[Any, ...], AotKernel] = {}
        for k in group:
            sig = (tuple(sorted(k.constants)), tuple(sorted(k.multiple_of)), k.arch)
            if sig in keys:
                raise AotError(
                    f"{keys[sig].name} and {k.name} are the same specialization of {base!r} "
                    f"({k.spec_text}, {k.arch}); link one of them"
                )
            keys[sig] = k
        dname = names.get(base, re.sub(r"_+", "_", base))
        if not C_IDENT.match(dname):
            raise AotError(f"dispatcher name {dname!r} for {base!r} is not a C identifier")
        if dname in seen or dname in dispatchers:
            raise AotError(
                f"the dispatcher of {base!r} would be called {dname!r}, which is taken; "
                f"name it with --dispatch {base}=<name>"
            )
        ordered = sorted(enumerate(group), key=lambda ik: (_specificity(ik[1]), ik[0]))
        dispatchers[dname] = tuple(k for _, k in ordered)
    return AotLibrary(name, tuple(loaded), dispatchers)


def _plist(params: Sequence[AotParam]) -> str:
    return ", ".join(f"{p.llvm_type} {p.name}" for p in params)
