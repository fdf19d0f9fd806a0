"""hermetic's wheel test project: a few LLVMSupport functions through a nanobind extension."""

from ._probe import demangle, llvm_version, xxh3

__all__ = ["demangle", "llvm_version", "xxh3"]
