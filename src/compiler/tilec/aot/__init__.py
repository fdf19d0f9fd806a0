"""Ahead-of-time kernels as C sources: `tilec aot` and `tilec aot-link`.

`compile()` compiles one kernel (one specialization) for a CUDA target with no GPU
present and gives a `.c`/`.h` pair: the cubin embedded as a byte array (PTX too,
optionally, as the driver-JIT fallback), and a launcher that loads the module
lazily, exactly once and thread-safely (pthread_once), caches the CUfunction,
checks every driver call, and launches through a typed C signature taking the
stream and the grid. Names and the header carry the specialization.

`link()` puts several AOT kernels into one library and adds, per kernel, a
dispatcher taking all of the kernel's parameters that picks the most specific
specialization that fits the runtime arguments (and the device, when several
archs are linked), and fails with CUDA_ERROR_NOT_FOUND and a message naming the
arguments and the compiled specializations when none fits.
"""

from __future__ import annotations

from .build import compile, from_kernel
from .cuda import c_type
from .kernel import FORMAT, AotKernel, AotParam
from .link import AotLibrary, link

__all__ = [
    "FORMAT",
    "AotKernel",
    "AotLibrary",
    "AotParam",
    "c_type",
    "compile",
    "from_kernel",
    "link",
]
