"""The cuda backend's own compile options and metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import TargetError
from ...kernel import Metadata

ASSEMBLERS = ("ptxas", "nvjitlink")


@dataclass(frozen=True)
class CudaOptions:
    """Given as `tilec.compile(..., ptx_version=80, ftz=True)` or
    `CompileOptions(backend_options={...})`; parsed by `CudaBackend.options`."""

    ptx_version: int | None = None  # e.g. 80 for PTX ISA 8.0; None: LLVM's minimum for target
    ftz: bool = False  # nvvm-reflect-ftz: libdevice flushes denormals
    ptxas_options: tuple[str, ...] = ()
    use_ptxas: bool = True  # False: no cubin at all (either assembler); the driver JITs the PTX
    # PTX -> cubin: "ptxas" (the process; the default) or "nvjitlink" (in this process, through
    # cuda-bindings; not the default until its SASS is shown to match, see nvjitlink.py).
    assembler: str = "ptxas"

    def validate(self) -> None:
        """Types and ranges; whether this LLVM knows `ptx_version` is checked with the target."""
        if self.ptx_version is not None and (
            isinstance(self.ptx_version, bool) or not isinstance(self.ptx_version, int)
        ):
            raise TargetError(f"ptx_version must be an int like 80, got {self.ptx_version!r}")
        for name in ("ftz", "use_ptxas"):
            if not isinstance(getattr(self, name), bool):
                raise TargetError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.assembler not in ASSEMBLERS:
            raise TargetError(
                f"assembler must be one of {', '.join(map(repr, ASSEMBLERS))}, "
                f"got {self.assembler!r}"
            )
        if not isinstance(self.ptxas_options, tuple) or (
            self.ptxas_options and any(not isinstance(o, str) for o in self.ptxas_options)
        ):
            raise TargetError(
                f"ptxas_options must be a sequence of strings, got {self.ptxas_options!r}"
            )

    @property
    def features(self) -> str:
        """LLVM subtarget features for the NVPTX target."""
        return f"+ptx{self.ptx_version}" if self.ptx_version is not None else ""


@dataclass
class CudaMetadata(Metadata):
    """Metadata plus what libdevice linking, ptxas and the driver report."""

    # See Metadata.TUPLE_FIELDS (a cache hit reads these without looking the fields up).
    TUPLE_FIELDS: ClassVar[tuple[str, ...]] = (*Metadata.TUPLE_FIELDS, "libdevice_linked")

    libdevice: str | None = None
    libdevice_linked: tuple[str, ...] = ()
    ptxas: str | None = None
    ptxas_version: str | None = None
    assembler: str = "ptxas"
    nvjitlink_version: str | None = None
    ptxas_log: str = ""
    registers: int | None = None
    shared_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_bytes: int | None = None
