"""The in-tree backend `cuda`: its options, NVPTX lowering, ptxas, driver, launch, and AOT.

Modules: `backend` (CudaBackend, CudaKernel), `options` (CudaOptions, CudaMetadata),
`arch` (sm_XX names), `toolchain` (finding ptxas, libdevice, nvdisasm), `ptxas`
(PTX -> cubin), `driver` (cuda.bindings.driver, imported lazily), `launch`
(device pointers), `aot` (C launchers; import it as tilec.backends.cuda.aot).
"""

from __future__ import annotations

from .backend import CudaBackend, CudaKernel
from .options import CudaMetadata, CudaOptions

__all__ = ["CudaBackend", "CudaKernel", "CudaMetadata", "CudaOptions"]
