"""From a compiled `cuda` kernel (or IR, through tilec.compile) to its AOT description."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import llvmlite.ir

from ..backends.cuda.options import CudaMetadata
from ..compiler import compile as compile_kernel
from ..errors import AotError, BackendError
from ..kernel import CompiledKernel
from ..settings import Settings
from ..specialize import Constant, ParamRef
from .kernel import AotKernel, AotParam, block_dims, check_c_name


def _default_name(entry: str, arch: str) -> str:
    # Single underscores: C++ reserves names with "__" anywhere.
    return re.sub(r"_+", "_", f"{entry}_{arch.replace('sm_', 'sm')}")


def from_kernel(
    kernel: CompiledKernel,
    *,
    block: int | Sequence[int] = 128,
    shared_mem: int = 0,
    name: str | None = None,
    embed_ptx: bool = False,
) -> AotKernel:
    """The AOT description of an already compiled `cuda` kernel."""
    backend = kernel.backend
    if backend is None or backend.binary_format != "cubin":
        what = f"backend {backend.name!r} ({backend.binary_format})" if backend else "this kernel"
        raise BackendError(f"AOT C launchers need cubins; {what} does not make them")
    cubin = kernel.asm.get("cubin")
    if not cubin:
        raise AotError(
            "AOT needs the cubin, and no assembler was found (or use_ptxas=False): set "
            "TILEC_PTXAS or CUDA_HOME, or pip install nvidia-cuda-nvcc or nvidia-nvptxcompiler"
        )
    md = kernel.metadata
    assert isinstance(md, CudaMetadata)  # a cubin comes from the cuda backend
    if name is None:
        name = _default_name(md.name, md.target)
    check_c_name(name, "launcher name")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
        raise AotError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
    spec = md.specialization or {}
    return AotKernel(
        name=name,
        entry=md.name,
        kernel=md.base_kernel or md.name,
        target=str(kernel.target) if kernel.target is not None else md.target,
        arch=md.target,
        params=tuple(AotParam(n, t) for n, t in zip(md.param_names, md.signature, strict=True)),
        base_params=tuple(
            AotParam(n, t) for n, t in zip(md.base_param_names, md.base_signature, strict=True)
        ),
        constants=tuple((str(n), v) for n, v in dict(spec.get("constants", {})).items()),
        multiple_of=tuple((str(n), int(k)) for n, k in dict(spec.get("multiple_of", {})).items()),
        block=block_dims(block, "block"),
        shared_mem=shared_mem,
        cubin=bytes(cubin),
        ptx=str(kernel.asm["ptx"]) if embed_ptx else None,
        metadata={
            "registers": md.registers,
            "shared_bytes": md.shared_bytes,
            "spill_stores": md.spill_stores,
            "spill_loads": md.spill_loads,
            "ptxas_version": md.ptxas_version,
            "assembler": md.assembler,
            "nvptxcompiler_version": md.nvptxcompiler_version,
            "llvm_version": md.llvm_version,
            "cache_key": kernel.key,
        },
    )


def compile(
    src: str | bytes | llvmlite.ir.Module,
    target: str = "cuda:90",
    *,
    kernel: str | None = None,
    constants: Mapping[ParamRef, Constant] | Iterable[tuple[ParamRef, Constant]] | None = None,
    multiple_of: Mapping[ParamRef, int] | Iterable[tuple[ParamRef, int]] | None = None,
    block: int | Sequence[int] = 128,
    shared_mem: int = 0,
    name: str | None = None,
    embed_ptx: bool = False,
    opt_level: int = 3,
    ptx_version: int | None = None,
    ftz: bool = False,
    ptxas_options: Sequence[str] = (),
    assembler: str | None = None,
    settings: Settings | None = None,
) -> AotKernel:
    """Compile one kernel (specialization) for `target` ("cuda:90") into an AOT description.

    Needs no GPU; needs ptxas or nvPTXCompiler. `block` is fixed into the launcher; `shared_mem` is
    the dynamic shared memory each launch asks for. `assembler`: the cuda backend's (None:
    TILEC_ASSEMBLER, else auto). `.write(dir)` gives the C files.
    """
    # The JIT's compile, with an assembler required: AOT embeds a cubin.
    own: dict[str, Any] = {"assembler": assembler} if assembler is not None else {}
    compiled = compile_kernel(
        src,
        target,
        opt_level=opt_level,
        kernel=kernel,
        constants=constants,
        multiple_of=multiple_of,
        settings=settings,
        ptx_version=ptx_version,
        ftz=ftz,
        ptxas_options=tuple(ptxas_options),
        use_ptxas=True,
        **own,
    )
    return from_kernel(compiled, block=block, shared_mem=shared_mem, name=name, embed_ptx=embed_ptx)
