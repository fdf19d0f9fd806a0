"""tilec: LLVM IR -> PTX -> cubin through LLVM's NVPTX backend, with a cuda-python runtime."""

from __future__ import annotations

from . import aot, backends, ir
from .aot import AotKernel, AotLibrary
from .backends import Backend, Target
from .compiler import CompiledKernel, CompileOptions, Compiler, Metadata, __version__, compile
from .errors import (
    AotError,
    BackendError,
    CacheError,
    CompileError,
    CudaError,
    CudaUnavailableError,
    IRError,
    LaunchArgumentError,
    LaunchValueError,
    PluginError,
    PtxasError,
    TargetError,
    TilecError,
    ToolError,
    ToolNotFoundError,
)
from .native import NativeModule, llvm_version, registered_targets
from .settings import Settings

__all__ = [
    "AotError",
    "AotKernel",
    "AotLibrary",
    "Backend",
    "BackendError",
    "CacheError",
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
    "PluginError",
    "PtxasError",
    "Settings",
    "Target",
    "TargetError",
    "TilecError",
    "ToolError",
    "ToolNotFoundError",
    "__version__",
    "aot",
    "backends",
    "compile",
    "ir",
    "llvm_version",
    "registered_targets",
]
