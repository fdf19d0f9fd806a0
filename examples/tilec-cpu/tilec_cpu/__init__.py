"""tilec-cpu: an example out-of-tree tilec backend that runs kernels on the host CPU."""

from __future__ import annotations

from .backend import CPUBackend, CPUKernel, host_pointer

__all__ = ["CPUBackend", "CPUKernel", "host_pointer"]
