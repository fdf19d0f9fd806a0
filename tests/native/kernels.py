"""Kernels shared by the native and gpu tiers: built with tilec.ir, or written as IR text."""

from __future__ import annotations

import llvmlite.ir as ir

BLOCK = 256  # threads per block of the reduction; also its shared array length


def vector_add(tir: object) -> ir.Module:
    """out[i] = a[i] + b[i] for i < n (f32)."""
    T = tir  # tilec.ir, passed in so the staged package is used
    m = T.new_module("vadd")  # type: ignore[attr-defined]
    fn = T.kernel(m, "vadd", [T.ptr(), T.ptr(), T.ptr(), T.i32], ["a", "b", "out", "n"])  # type: ignore[attr-defined]
    a, b, out, n = fn.args
    entry = fn.append_basic_block("entry")
    body = fn.append_basic_block("body")
    done = fn.append_basic_block("done")
    bld = ir.IRBuilder(entry)
    i = T.global_index(bld)  # type: ignore[attr-defined]
    bld.cbranch(bld.icmp_signed("<", i, n), body, done)
    bld.position_at_end(body)
    s = bld.fadd(T.load(bld, a, i, T.f32), T.load(bld, b, i, T.f32))  # type: ignore[attr-defined]
    T.store(bld, s, out, i)  # type: ignore[attr-defined]
    bld.branch(done)
    bld.position_at_end(done)
    bld.ret_void()
    return m


def block_sum(tir: object) -> ir.Module:
    """out[blockIdx] = sum(x[blockIdx*BLOCK : ...]) via a shared-memory tree with barriers."""
    T = tir
    m = T.new_module("bsum")  # type: ignore[attr-defined]
    fn = T.kernel(m, "block_sum", [T.ptr(), T.ptr(), T.i32])  # type: ignore[attr-defined]
    x, out, n = fn.args
    buf = T.shared_array(m, "partial", T.f32, BLOCK)  # type: ignore[attr-defined]
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop")
    add = fn.append_basic_block("add")
    sync = fn.append_basic_block("sync")
    tail = fn.append_basic_block("tail")
    write = fn.append_basic_block("write")
    exit_ = fn.append_basic_block("exit")
    i32 = T.i32  # type: ignore[attr-defined]
    f32 = T.f32  # type: ignore[attr-defined]

    bld = ir.IRBuilder(entry)
    tid = T.thread_idx(bld)  # type: ignore[attr-defined]
    gid = T.global_index(bld)  # type: ignore[attr-defined]
    inb = bld.icmp_signed("<", gid, n)
    # Out-of-range lanes contribute 0 (load from index 0 is always valid when n > 0).
    safe = bld.select(inb, gid, ir.Constant(i32, 0))
    v = bld.select(inb, T.load(bld, x, safe, f32), ir.Constant(f32, 0.0))  # type: ignore[attr-defined]
    T.store(bld, v, buf, tid)  # type: ignore[attr-defined]
    T.barrier(bld)  # type: ignore[attr-defined]
    half = bld.lshr(T.block_dim(bld), ir.Constant(i32, 1))  # type: ignore[attr-defined]
    bld.branch(loop)

    bld.position_at_end(loop)
    s = bld.phi(i32, "s")
    s.add_incoming(half, entry)
    bld.cbranch(bld.icmp_unsigned(">", s, ir.Constant(i32, 0)), add, tail)

    bld.position_at_end(add)
    lane_active = fn.append_basic_block("lane")
    bld.cbranch(bld.icmp_unsigned("<", tid, s), lane_active, sync)
    bld.position_at_end(lane_active)
    other = T.load(bld, buf, bld.add(tid, s), f32)  # type: ignore[attr-defined]
    mine = T.load(bld, buf, tid, f32)  # type: ignore[attr-defined]
    T.store(bld, bld.fadd(mine, other), buf, tid)  # type: ignore[attr-defined]
    bld.branch(sync)

    bld.position_at_end(sync)
    T.barrier(bld)  # type: ignore[attr-defined]
    s_next = bld.lshr(s, ir.Constant(i32, 1))
    s.add_incoming(s_next, sync)
    bld.branch(loop)

    bld.position_at_end(tail)
    bld.cbranch(bld.icmp_unsigned("==", tid, ir.Constant(i32, 0)), write, exit_)
    bld.position_at_end(write)
    T.store(bld, T.load(bld, buf, ir.Constant(i32, 0), f32), out, T.block_idx(bld))  # type: ignore[attr-defined]
    bld.branch(exit_)
    bld.position_at_end(exit_)
    bld.ret_void()
    return m


# y[i] = expf(x[i]) * scale, as hand-written IR text (the text input path), calling libdevice.
EXP_IR = """\
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_expf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()

define void @exp_scale(ptr addrspace(1) %x, ptr addrspace(1) %y, float %scale, i64 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %bdim = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %bid, %bdim
  %i32 = add i32 %base, %tid
  %i = zext i32 %i32 to i64
  %ok = icmp ult i64 %i, %n
  br i1 %ok, label %body, label %done
body:
  %px = getelementptr inbounds float, ptr addrspace(1) %x, i64 %i
  %v = load float, ptr addrspace(1) %px, align 4
  %e = call float @__nv_expf(float %v)
  %r = fmul float %e, %scale
  %py = getelementptr inbounds float, ptr addrspace(1) %y, i64 %i
  store float %r, ptr addrspace(1) %py, align 4
  br label %done
done:
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @exp_scale, !"kernel", i32 1}
"""

# y[i] = sinf(x[i]) * scale: libdevice's sinf has a slow path (Payne-Hanek) whose local array
# ptxas keeps in registers when it compiles a whole program, and not when it compiles relocatably.
SIN_IR = EXP_IR.replace("__nv_expf", "__nv_sinf").replace("exp_scale", "sin_scale")
