"""CUDA arch names: the one pattern for `sm_90`, `90`, `sm_90a` and what is read from it."""

from __future__ import annotations

import re

# "sm_" is optional where a backend arch is written ("cuda:90"); "a" marks the
# arch-specific targets (sm_90a), whose cubins run on that exact arch only.
_ARCH = re.compile(r"^(sm_)?(\d+)(a?)$")


def normalize(arch: str) -> str | None:
    """The arch as LLVM names it ("90", "90a" -> "sm_90", "sm_90a"); None for no CUDA arch."""
    m = _ARCH.match(arch)
    return f"sm_{m.group(2)}{m.group(3)}" if m else None


def is_bare_target(spec: str) -> bool:
    """Whether a target written without "<backend>:" names a CUDA arch ("sm_90", "90")."""
    m = _ARCH.match(spec)
    return m is not None and (m.group(1) is not None or not m.group(3))


def number(arch: str) -> tuple[int, bool]:
    """("sm_90a") -> (90, True): the compute capability and whether it is arch-specific."""
    m = _ARCH.match(arch)
    if m is None or m.group(1) is None:
        raise ValueError(f"unexpected CUDA arch {arch!r}")
    return int(m.group(2)), bool(m.group(3))
