"""The in-tree backend `cuda`: its options, NVPTX lowering, ptxas, driver, launch, and AOT.

Modules: `backend` (CudaBackend, CudaKernel), `options` (CudaOptions, CudaMetadata),
`arch` (sm_XX names), `toolchain` (finding ptxas, libdevice, nvdisasm, nvPTXCompiler), PTX ->
cubin by `ptxas`, `nvptxcompiler` (in process, ptxas's code) or `nvjitlink`, `cubin` (its
sections), `driver` (cuda.bindings.driver, imported lazily), `launch` (device pointers). The
C launchers of ahead-of-time kernels are tilec.aot's, beside the compiler that makes them.
"""

from __future__ import annotations

from .backend import CudaBackend, CudaKernel
from .options import CudaMetadata, CudaOptions

__all__ = ["CudaBackend", "CudaKernel", "CudaMetadata", "CudaOptions"]
