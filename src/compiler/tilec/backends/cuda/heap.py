"""Keep the heap that an in-process assembly frees, for the next one (glibc's M_TOP_PAD).

NVIDIA's PTX compiler (nvPTXCompiler, and nvJitLink, which holds the same compiler) allocates a
few MiB for each compile and frees them at its end. glibc then gives the top of the heap back to
the system, and the next compile faults those pages in again, thousands of them, a good part of a
small kernel's assembly (`bench/tilec_heap_pad.py` measures both, side by side).
Asking glibc to keep `TILEC_HEAP_PAD_MIB` (32 by default) MiB of the heap's top when it trims,
and to grow it by as much, removes them; the code made is the same.

The setting is the process's, not tilec's alone, so tilec sets it once, at the first in-process
assembly, and leaves it where the user has chosen: `TILEC_HEAP_PAD_MIB=0`, the user's own
`MALLOC_TOP_PAD_` / `MALLOC_TRIM_THRESHOLD_` or their `GLIBC_TUNABLES` counterparts, and a C
library that is not glibc. As with any of these parameters, glibc then stops moving its mmap
threshold up by itself (mallopt(3)): it stays where the process had brought it.
"""

from __future__ import annotations

import platform
import threading

from ...errors import TargetError
from ...settings import Settings

DEFAULT_MIB = 32
M_TOP_PAD = -2  # glibc's <malloc.h>

_LOCK = threading.Lock()
_DONE: list[str] = []  # what keep() did in this process, once: its one line for `tilec assembler`


def pad_bytes(settings: Settings) -> int:
    """TILEC_HEAP_PAD_MIB in bytes (0: leave glibc's malloc as the process has it)."""
    raw = settings.heap_pad_mib.strip()
    if not raw:
        return DEFAULT_MIB << 20
    try:
        mib = int(raw)
    except ValueError:
        mib = -1
    if mib < 0 or mib > 4096:
        raise TargetError(
            f"TILEC_HEAP_PAD_MIB must be a whole number of MiB from 0 to 4096, got {raw!r} "
            f"(0 leaves glibc's malloc alone; unset means {DEFAULT_MIB})"
        )
    return mib << 20


def plan(settings: Settings) -> tuple[int, str]:
    """(bytes to ask for, 0 for none; why), without changing anything."""
    pad = pad_bytes(settings)
    if pad == 0:
        return 0, "left alone (TILEC_HEAP_PAD_MIB=0)"
    if settings.malloc_tuned:
        return 0, "left alone: the environment tunes glibc's malloc trimming itself"
    if platform.libc_ver()[0] != "glibc":
        return 0, "left alone: the C library is not glibc"
    why = f"keeps {pad >> 20} MiB of freed heap for the next in-process assembly"
    return pad, f"{why} (TILEC_HEAP_PAD_MIB)"


def _mallopt(param: int, value: int) -> int:
    import ctypes  # here: a cache hit and a ptxas compile never need it

    return int(ctypes.CDLL(None).mallopt(param, value))


def keep(settings: Settings) -> str:
    """Set glibc's top pad once per process, as `plan` says; returns what was done."""
    with _LOCK:
        if not _DONE:
            pad, why = plan(settings)
            if pad and _mallopt(M_TOP_PAD, pad) != 1:
                why = "left alone: glibc refused M_TOP_PAD"
            _DONE.append(why)
        return _DONE[0]


def state(settings: Settings) -> str:
    """What keep() did in this process, or would do at the first in-process assembly."""
    with _LOCK:
        return _DONE[0] if _DONE else plan(settings)[1]
