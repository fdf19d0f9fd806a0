"""Helpers for building NVPTX kernels with llvmlite.ir (pure Python, no LLVM needed).

LLVM 19 marks kernels through `!nvvm.annotations` (the `ptx_kernel` calling
convention alone is honoured only from LLVM 20), so `kernel()` adds that
annotation. Pointers are opaque (`ptr addrspace(N)`); `to_text()` prints a
module that way regardless of llvmlite's typed-pointer default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Literal

import llvmlite.ir as ir
import llvmlite.ir.types as _lltypes

TRIPLE = "nvptx64-nvidia-cuda"
DATA_LAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"

# NVPTX address spaces.
GENERIC = 0
GLOBAL = 1
SHARED = 3
CONSTANT = 4
LOCAL = 5

Axis = Literal["x", "y", "z"]

i1 = ir.IntType(1)
i8 = ir.IntType(8)
i16 = ir.IntType(16)
i32 = ir.IntType(32)
i64 = ir.IntType(64)
f32 = ir.FloatType()
f64 = ir.DoubleType()
void = ir.VoidType()


def ptr(addrspace: int = GLOBAL) -> ir.PointerType:
    """An opaque pointer type in `addrspace` (global by default)."""
    return ir.PointerType(addrspace=addrspace)


def new_module(name: str = "tilec") -> ir.Module:
    module = ir.Module(name=name)
    module.triple = TRIPLE
    module.data_layout = DATA_LAYOUT
    return module


def mark_kernel(module: ir.Module, fn: ir.Function) -> None:
    module.add_named_metadata(
        "nvvm.annotations", [fn, ir.MetaDataString(module, "kernel"), ir.Constant(i32, 1)]
    )


def kernel(
    module: ir.Module,
    name: str,
    params: Sequence[ir.Type],
    names: Sequence[str] | None = None,
) -> ir.Function:
    """Declare a `void name(params...)` kernel entry point and mark it as a kernel.

    `names` name the parameters: specializations (`constants={"n": ...}`) and AOT
    launchers refer to them by these names.
    """
    fn = ir.Function(module, ir.FunctionType(void, list(params)), name=name)
    if names is not None:
        if len(names) != len(params):
            raise ValueError(f"{len(params)} parameters but {len(names)} names")
        for arg, pname in zip(fn.args, names, strict=True):
            arg.name = pname
    mark_kernel(module, fn)
    return fn


def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, ir.FunctionType(ret, list(args)), name=name)


def _sreg(builder: ir.IRBuilder, reg: str, axis: Axis) -> ir.Value:
    if axis not in ("x", "y", "z"):
        raise ValueError(f"axis must be 'x', 'y' or 'z', got {axis!r}")
    fn = _intrinsic(builder.module, f"llvm.nvvm.read.ptx.sreg.{reg}.{axis}", i32, [])
    return builder.call(fn, [], name=f"{reg}.{axis}")


def thread_idx(builder: ir.IRBuilder, axis: Axis = "x") -> ir.Value:
    return _sreg(builder, "tid", axis)


def block_dim(builder: ir.IRBuilder, axis: Axis = "x") -> ir.Value:
    return _sreg(builder, "ntid", axis)


def block_idx(builder: ir.IRBuilder, axis: Axis = "x") -> ir.Value:
    return _sreg(builder, "ctaid", axis)


def grid_dim(builder: ir.IRBuilder, axis: Axis = "x") -> ir.Value:
    return _sreg(builder, "nctaid", axis)


def global_index(builder: ir.IRBuilder, axis: Axis = "x") -> ir.Value:
    """blockIdx * blockDim + threadIdx as i32."""
    return builder.add(
        builder.mul(block_idx(builder, axis), block_dim(builder, axis)), thread_idx(builder, axis)
    )


def barrier(builder: ir.IRBuilder) -> None:
    """__syncthreads(): `llvm.nvvm.barrier0`."""
    builder.call(_intrinsic(builder.module, "llvm.nvvm.barrier0", void, []), [])


def shared_array(
    module: ir.Module, name: str, elem: ir.Type, count: int, align: int = 16
) -> ir.GlobalVariable:
    """A statically sized `__shared__` array (addrspace 3, undef initializer)."""
    gv = ir.GlobalVariable(module, ir.ArrayType(elem, count), name=name, addrspace=SHARED)
    gv.linkage = "internal"
    gv.initializer = ir.Constant(gv.value_type, ir.Undefined)
    gv.align = align
    # llvmlite types globals as typed pointers; make it opaque so loads and
    # stores through it type-check against any element type.
    gv.type = ptr(SHARED)
    return gv


def as_ptr(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """View a global (typed in llvmlite) as an opaque pointer of its address space."""
    ty = value.type
    if not isinstance(ty, ir.PointerType):
        raise TypeError(f"expected a pointer, got {ty}")
    if ty.is_opaque:
        return value
    # llvmlite folds pointer-to-pointer bitcasts away, so go through the
    # generic address space and back: both casts are free in PTX.
    generic = builder.addrspacecast(value, ptr(GENERIC))
    return generic if ty.addrspace == GENERIC else builder.addrspacecast(generic, ptr(ty.addrspace))


def element_ptr(
    builder: ir.IRBuilder, base: ir.Value, index: ir.Value, elem: ir.Type, name: str = ""
) -> ir.Value:
    """&base[index] for elements of type `elem`."""
    return builder.gep(as_ptr(builder, base), [index], inbounds=True, source_etype=elem, name=name)


def load(builder: ir.IRBuilder, base: ir.Value, index: ir.Value, elem: ir.Type) -> ir.Value:
    return builder.load(element_ptr(builder, base, index, elem), typ=elem)


def store(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value) -> None:
    builder.store(value, element_ptr(builder, base, index, value.type))


def to_generic(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return builder.addrspacecast(as_ptr(builder, value), ptr(GENERIC))


def libdevice(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """Declare a libdevice function (`__nv_expf`, ...); tilec links libdevice on demand."""
    if not name.startswith("__nv_"):
        raise ValueError(f"libdevice functions start with '__nv_', got {name!r}")
    return _intrinsic(module, name, ret, args)


@contextlib.contextmanager
def _opaque_pointers() -> Iterator[None]:
    saved = _lltypes.ir_layer_typed_pointers_enabled
    _lltypes.ir_layer_typed_pointers_enabled = False
    try:
        yield
    finally:
        _lltypes.ir_layer_typed_pointers_enabled = saved


def to_text(module: ir.Module) -> str:
    """The module as LLVM 19 IR text, with opaque pointers."""
    with _opaque_pointers():
        return str(module)
