"""Every failure tilec raises: what failed, why, and (where it helps) what to do."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


class TilecError(Exception):
    """Base class of tilec's errors."""


class IRError(TilecError, ValueError):
    """The IR could not be parsed or does not verify.

    `line` and `column` are 1-based; 0 when the input has no positions (bitcode,
    verifier errors).
    """

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


class TargetError(TilecError, ValueError):
    """An unknown target, PTX version or option."""


class CompileError(TilecError):
    """LLVM failed to link, optimize or generate code for a valid module."""


class CacheError(TilecError):
    """A cached kernel's bytes failed their check and could not be read again."""


class ToolNotFoundError(TilecError):
    """A tool or file tilec needs (ptxas, libdevice) is not there."""


class ToolError(TilecError):
    """A subprocess failed: carries the command, exit code, output tail and a repro line."""

    def __init__(
        self,
        what: str,
        command: Sequence[str],
        returncode: int,
        output: str,
        repro: str | None = None,
        tail_lines: int = 40,
    ) -> None:
        self.command = list(command)
        self.returncode = returncode
        self.output = output
        lines = output.rstrip().splitlines()
        tail = "\n".join(lines[-tail_lines:])
        self.repro = repro or shlex.join(self.command)
        super().__init__(
            f"{what} failed with exit code {returncode}\n"
            f"command: {shlex.join(self.command)}\n"
            f"output (last {min(len(lines), tail_lines)} lines):\n{tail}\n"
            f"repro: {self.repro}"
        )


class PtxasError(ToolError):
    """ptxas rejected the PTX."""


class CudaError(TilecError):
    """A CUDA driver call failed."""

    def __init__(self, call: str, code: int, name: str, description: str) -> None:
        self.call = call
        self.code = code
        self.name = name
        super().__init__(f"{call} failed: {name} ({code}): {description}")


class CudaUnavailableError(TilecError):
    """cuda-bindings is not installed or no CUDA driver/device is usable."""


class LaunchArgumentError(TilecError, TypeError):
    """Kernel arguments do not match the kernel's signature (raised before launch)."""


class LaunchValueError(TilecError, ValueError):
    """A kernel argument or launch configuration is out of range (raised before launch)."""


class BackendError(TilecError, ValueError):
    """No backend serves a target, or a backend cannot do what was asked (e.g. AOT)."""


class PluginError(TilecError):
    """A backend plugin is broken, ambiguous or misconfigured.

    `plugin` is the backend name (or the plugin's directory when the manifest
    names none) and `origin` says where it came from: built in, an entry point
    of a distribution, or a TILEC_PLUGIN_DIRS directory.
    """

    def __init__(self, message: str, plugin: str = "", origin: str = "") -> None:
        super().__init__(message)
        self.plugin = plugin
        self.origin = origin


class AotError(TilecError):
    """Ahead-of-time generation or linking was asked for something inconsistent."""
