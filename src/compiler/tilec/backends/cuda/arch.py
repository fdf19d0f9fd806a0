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


# The CUDA releases whose PTX compiler knows an arch: (first, last) as (major, minor), None where
# open. CUDA 13.0 dropped sm_50 to sm_72 and renamed sm_101 to sm_110.
_RELEASES: dict[int, tuple[tuple[int, int], tuple[int, int] | None]] = {
    80: ((11, 0), None),
    86: ((11, 1), None),
    87: ((11, 4), None),
    89: ((11, 8), None),
    90: ((11, 8), None),
    100: ((12, 8), None),
    101: ((12, 8), (12, 9)),
    103: ((12, 9), None),
    110: ((13, 0), None),
    120: ((12, 8), None),
    121: ((12, 9), None),
}


def release_problem(arch: str, release: str) -> str | None:
    """Why a PTX compiler of CUDA `release` ("13.0.88") cannot compile for `arch`, or None where it
    can (or where neither is known here)."""
    # String methods, no regular expression: a cache hit keyed by the IR asks this.
    digits = arch[3:].rstrip("a") if arch.startswith("sm_") else ""
    major, _, rest = release.partition(".")
    minor = rest.partition(".")[0]
    if not (digits.isdigit() and major.isdigit() and minor.isdigit()):
        return None
    cc, have = int(digits), (int(major), int(minor))
    if cc <= 72 and have >= (13, 0):
        return f"CUDA {have[0]}.{have[1]} no longer compiles for {arch} (CUDA 12.9 was the last)"
    first, last = _RELEASES.get(cc, (None, None))
    if first is not None and have < first:
        return f"{arch} needs CUDA {first[0]}.{first[1]} or newer, this is CUDA {have[0]}.{have[1]}"
    if last is not None and have > last:
        return f"CUDA {last[0]}.{last[1]} was the last to know {arch}"
    return None
