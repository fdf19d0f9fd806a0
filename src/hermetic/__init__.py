"""hermetic: reproducible, offline builds of slim LLVM toolchains and GPU compiler wheels."""

__version__ = "0.1.0"
