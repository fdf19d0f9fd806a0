"""tilec: LLVM IR -> PTX -> cubin through LLVM's NVPTX backend, with a cuda-python runtime."""

from __future__ import annotations

from . import ir
from .compiler import CompiledKernel, CompileOptions, Compiler, Metadata, __version__, compile
from .errors import (
    CompileError,
    CudaError,
    CudaUnavailableError,
    IRError,
    LaunchArgumentError,
    LaunchValueError,
    PtxasError,
    TargetError,
    TilecError,
    ToolError,
    ToolNotFoundError,
)
from .native import NativeModule, llvm_version, registered_targets
from .settings import Settings

__all__ = [
    "CompileError",
    "CompileOptions",
    "CompiledKernel",
    "Compiler",
    "CudaError",
    "CudaUnavailableError",
    "IRError",
    "LaunchArgumentError",
    "LaunchValueError",
    "Metadata",
    "NativeModule",
    "PtxasError",
    "Settings",
    "TargetError",
    "TilecError",
    "ToolError",
    "ToolNotFoundError",
    "__version__",
    "compile",
    "ir",
    "llvm_version",
    "registered_targets",
]
