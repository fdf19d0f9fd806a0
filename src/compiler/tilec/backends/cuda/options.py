"""The cuda backend's own compile options and metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import TargetError
from ...kernel import Metadata

ASSEMBLERS = ("auto", "ptxas", "nvptxcompiler", "nvjitlink")


@dataclass(frozen=True)
class CudaOptions:
    """Given as `tilec.compile(..., ptx_version=80, ftz=True)` or
    `CompileOptions(backend_options={...})`; parsed by `CudaBackend.options`."""

    # Keyed as the assembler it resolves to (CudaBackend.cache_key), not as written.
    KEYED_BY_BACKEND: ClassVar[tuple[str, ...]] = ("assembler",)

    ptx_version: int | None = None  # e.g. 80 for PTX ISA 8.0; None: LLVM's minimum for target
    ftz: bool = False  # nvvm-reflect-ftz: libdevice flushes denormals
    ptxas_options: tuple[str, ...] = ()
    use_ptxas: bool = True  # False: no cubin at all (either assembler); the driver JITs the PTX
    # PTX -> cubin: "ptxas" (the process), "nvptxcompiler" (ptxas's code in this process, see
    # nvptxcompiler.py), "nvjitlink" (in process, `ptxas -c`'s code, see nvjitlink.py) or "auto"
    # (nvptxcompiler where it gives ptxas's code, else ptxas); None: TILEC_ASSEMBLER's, else auto.
    assembler: str | None = None

    def validate(self) -> None:
        """Types and ranges; whether this LLVM knows `ptx_version` is checked with the target."""
        if self.ptx_version is not None and (
            isinstance(self.ptx_version, bool) or not isinstance(self.ptx_version, int)
        ):
            raise TargetError(f"ptx_version must be an int like 80, got {self.ptx_version!r}")
        for name in ("ftz", "use_ptxas"):
            if not isinstance(getattr(self, name), bool):
                raise TargetError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.assembler is not None and self.assembler not in ASSEMBLERS:
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
    assembler_note: str = ""  # why `auto` chose the assembler
    nvjitlink_version: str | None = None
    nvptxcompiler_version: str | None = None
    ptxas_log: str = ""
    registers: int | None = None
    shared_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_bytes: int | None = None
