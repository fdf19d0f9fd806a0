"""The benchmark kernels, written once for tilec (llvmlite IR through tilec.ir) and once for Triton.

Each pair computes the same function on the same sizes:

* vector add     out[i] = a[i] + b[i]                                   (f32)
* exp/sin loop   y[i] = sum_{k<iters} exp(v_k), v_0 = x[i], v_{k+1} = sin(v_k) * scale
                 (a runtime loop calling libdevice's __nv_expf and __nv_sinf)
* row sum        out[r] = sum_c x[r, c]  over the last axis of a contiguous 2-D array

The tilec versions are plain LLVM IR: what a user (or a front end) hands the compiler.
Vector width is the kernel author's choice in IR (`<4 x float>` loads with align 16);
the scalar vector add is the one the gpu test tier uses.

Triton's kernels live in tilec_triton.py, so this module needs neither Triton nor a GPU.
"""

from __future__ import annotations

from types import ModuleType

import llvmlite.ir as ir

F32 = ir.FloatType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
V4 = ir.VectorType(F32, 4)


def _c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _gep(b: ir.IRBuilder, base: ir.Value, index64: ir.Value) -> ir.Value:
    return b.gep(base, [index64], inbounds=True, source_etype=F32)


def vadd_scalar(T: ModuleType) -> ir.Module:
    """One element per thread: out[i] = a[i] + b[i] for i < n (the gpu tier's kernel)."""
    m = T.new_module("vadd")
    fn = T.kernel(m, "vadd", [T.ptr(), T.ptr(), T.ptr(), T.i32])
    a, bb, out, n = fn.args
    entry, body, done = (fn.append_basic_block(x) for x in ("entry", "body", "done"))
    b = ir.IRBuilder(entry)
    i = T.global_index(b)
    b.cbranch(b.icmp_signed("<", i, n), body, done)
    b.position_at_end(body)
    T.store(b, b.fadd(T.load(b, a, i, F32), T.load(b, bb, i, F32)), out, i)
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return m


def vadd_vec(T: ModuleType, vectors: int, whole_vectors: bool = False, one_path: bool = False) -> ir.Module:
    """`vectors` x <4 x float> per thread (4*vectors elements), all loads issued before the adds.

    A block covers ntid*4*vectors consecutive elements; vector k of thread t sits at
    element base + 4*(k*ntid + t), so each warp's k-th access is one contiguous 512 B run.
    A block whose tile lies wholly inside n takes the vector path; the last one goes
    element by element with bounds checks. Pointers must be 16-byte aligned.

    whole_vectors: n must be a multiple of 4 (the kernel is named vadd_vN_m4), and the last block
    goes vector by vector, each vector inside n or wholly past it: one check per vector where
    the element-wise tail has four, as Triton's vadd, specialized for an n divisible by 16,
    masks whole `v4` accesses.

    one_path: as whole_vectors, in one path (named vadd_vN_flat): every block checks each vector, with
    no separate path for a tile wholly inside n. This is the shape Triton's vadd lowers to (one
    straight run of predicated `v4` accesses); the two-path kernels hand ptxas the body twice. Each
    vector's loads come before its add, not all loads before all adds.
    """
    whole_vectors = whole_vectors or one_path
    name = f"vadd_v{4 * vectors}" + ("_flat" if one_path else "_m4" if whole_vectors else "")
    m = T.new_module(name)
    fn = T.kernel(m, name, [T.ptr(), T.ptr(), T.ptr(), T.i32])
    a, bb, out, n = fn.args
    blocks = {x: fn.append_basic_block(x) for x in ("entry", *(() if one_path else ("fast",)), "slow", "done")}
    slow, done = blocks["slow"], blocks["done"]
    b = ir.IRBuilder(blocks["entry"])
    tid = b.zext(T.thread_idx(b), I64)
    ntid = b.zext(T.block_dim(b), I64)
    bid = b.zext(T.block_idx(b), I64)
    n64 = b.zext(n, I64)
    tile = b.mul(ntid, ir.Constant(I64, 4 * vectors))
    base = b.mul(bid, tile)
    offs = [
        b.add(base, b.shl(b.add(b.mul(ir.Constant(I64, k), ntid), tid), ir.Constant(I64, 2))) for k in range(vectors)
    ]
    if one_path:
        b.branch(slow)
    else:
        b.cbranch(b.icmp_unsigned("<=", b.add(base, tile), n64), blocks["fast"], slow)
        b.position_at_end(blocks["fast"])
        va = [b.load(_gep(b, a, o), typ=V4, align=16) for o in offs]
        vb = [b.load(_gep(b, bb, o), typ=V4, align=16) for o in offs]
        for o, x, y in zip(offs, va, vb, strict=True):
            b.store(b.fadd(x, y), _gep(b, out, o), align=16)
        b.branch(done)

    b.position_at_end(slow)
    # each vector (whole_vectors) or each element of it: inside n, or skipped
    for k, o in enumerate(offs):
        for j in (None,) if whole_vectors else range(4):
            e, at, ty, align = (o, f"{k}", V4, 16) if j is None else (b.add(o, ir.Constant(I64, j)), f"{k}_{j}", F32, 4)
            do = fn.append_basic_block(f"tail{at}")
            nxt = fn.append_basic_block(f"next{at}")
            b.cbranch(b.icmp_unsigned("<", e, n64), do, nxt)
            b.position_at_end(do)
            s = b.fadd(b.load(_gep(b, a, e), typ=ty, align=align), b.load(_gep(b, bb, e), typ=ty, align=align))
            b.store(s, _gep(b, out, e), align=align)
            b.branch(nxt)
            b.position_at_end(nxt)
    b.branch(done)

    b.position_at_end(done)
    b.ret_void()
    return m


def exp_sin_loop(T: ModuleType) -> ir.Module:
    """y[i] = sum_{k<iters} expf(v_k); v_{k+1} = sinf(v_k) * scale: a loop and libdevice math."""
    m = T.new_module("expsin")
    fn = T.kernel(m, "expsin", [T.ptr(), T.ptr(), F32, I32, I32])
    x, y, scale, iters, n = fn.args
    expf = T.libdevice(m, "__nv_expf", F32, [F32])
    sinf = T.libdevice(m, "__nv_sinf", F32, [F32])
    entry, pre, loop, store, done = (fn.append_basic_block(s) for s in ("entry", "pre", "loop", "store", "done"))
    b = ir.IRBuilder(entry)
    i = T.global_index(b)
    b.cbranch(b.icmp_signed("<", i, n), pre, done)

    b.position_at_end(pre)
    v0 = T.load(b, x, i, F32)
    b.cbranch(b.icmp_signed(">", iters, _c32(0)), loop, store)

    b.position_at_end(loop)
    k = b.phi(I32, "k")
    v = b.phi(F32, "v")
    acc = b.phi(F32, "acc")
    acc_next = b.fadd(acc, b.call(expf, [v]))
    v_next = b.fmul(b.call(sinf, [v]), scale)
    k_next = b.add(k, _c32(1))
    k.add_incoming(_c32(0), pre)
    k.add_incoming(k_next, loop)
    v.add_incoming(v0, pre)
    v.add_incoming(v_next, loop)
    acc.add_incoming(ir.Constant(F32, 0.0), pre)
    acc.add_incoming(acc_next, loop)
    b.cbranch(b.icmp_signed("<", k_next, iters), loop, store)

    b.position_at_end(store)
    result = b.phi(F32, "result")
    result.add_incoming(ir.Constant(F32, 0.0), pre)
    result.add_incoming(acc_next, loop)
    T.store(b, result, y, i)
    b.branch(done)

    b.position_at_end(done)
    b.ret_void()
    return m


def _shfl_bfly(m: ir.Module) -> ir.Function:
    name = "llvm.nvvm.shfl.sync.bfly.f32"
    existing = m.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(m, ir.FunctionType(F32, [I32, F32, I32, I32]), name=name)


def _warp_sum(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    shfl = _shfl_bfly(b.module)
    for lane_mask in (16, 8, 4, 2, 1):
        other = b.call(shfl, [ir.Constant(I32, 0xFFFFFFFF), value, _c32(lane_mask), _c32(0x1F)])
        value = b.fadd(value, other)
    return value


def row_sum(T: ModuleType, unroll: int) -> ir.Module:
    """out[row] = sum(x[row, :ncols]); one block per row; ncols % 4 == 0, x 16-byte aligned.

    Each thread strides over the row in <4 x float> steps, `unroll` independent
    loads (and accumulators) per trip, then a remainder loop; the block reduces
    with warp shuffles and one shared-memory exchange between warps.
    """
    name = f"rowsum_u{unroll}"
    m = T.new_module(name)
    fn = T.kernel(m, name, [T.ptr(), T.ptr(), I32])
    x, out, ncols = fn.args
    smem = T.shared_array(m, "warp_sums", F32, 32)
    blocks = {
        s: fn.append_basic_block(s)
        for s in (
            "entry",
            "main_hdr",
            "main_body",
            "rem_hdr",
            "rem_body",
            "reduce",
            "lane0",
            "after_lane0",
            "warp0",
            "write",
            "done",
        )
    }
    b = ir.IRBuilder(blocks["entry"])
    tid32 = T.thread_idx(b)
    ntid32 = T.block_dim(b)
    row = b.zext(T.block_idx(b), I64)
    rowbase = b.mul(row, b.zext(ncols, I64))
    nvec = b.lshr(ncols, _c32(2))
    zero4 = ir.Constant(V4, [ir.Constant(F32, 0.0)] * 4)
    span = b.mul(ntid32, _c32(unroll - 1))  # j + span < nvec: the whole trip is in range
    step = b.mul(ntid32, _c32(unroll))
    b.branch(blocks["main_hdr"])

    def vload(bld: ir.IRBuilder, j: ir.Value) -> ir.Value:
        off = bld.add(rowbase, bld.shl(bld.zext(j, I64), ir.Constant(I64, 2)))
        return bld.load(_gep(bld, x, off), typ=V4, align=16)

    b.position_at_end(blocks["main_hdr"])
    j = b.phi(I32, "j")
    accs = [b.phi(V4, f"acc{u}") for u in range(unroll)]
    b.cbranch(b.icmp_unsigned("<", b.add(j, span), nvec), blocks["main_body"], blocks["rem_hdr"])

    b.position_at_end(blocks["main_body"])
    loaded = [vload(b, b.add(j, b.mul(ntid32, _c32(u)))) for u in range(unroll)]
    new_accs = [b.fadd(acc, v) for acc, v in zip(accs, loaded, strict=True)]
    j_next = b.add(j, step)
    b.branch(blocks["main_hdr"])
    j.add_incoming(tid32, blocks["entry"])
    j.add_incoming(j_next, blocks["main_body"])
    for acc, new in zip(accs, new_accs, strict=True):
        acc.add_incoming(zero4, blocks["entry"])
        acc.add_incoming(new, blocks["main_body"])

    b.position_at_end(blocks["rem_hdr"])
    j2 = b.phi(I32, "j2")
    acc_r = b.phi(V4, "acc_r")
    b.cbranch(b.icmp_unsigned("<", j2, nvec), blocks["rem_body"], blocks["reduce"])
    b.position_at_end(blocks["rem_body"])
    acc_rn = b.fadd(acc_r, vload(b, j2))
    j2n = b.add(j2, ntid32)
    b.branch(blocks["rem_hdr"])
    j2.add_incoming(j, blocks["main_hdr"])
    j2.add_incoming(j2n, blocks["rem_body"])
    acc_r.add_incoming(accs[0], blocks["main_hdr"])
    acc_r.add_incoming(acc_rn, blocks["rem_body"])

    b.position_at_end(blocks["reduce"])
    total = acc_r
    for acc in accs[1:]:
        total = b.fadd(total, acc)
    s = b.fadd(
        b.fadd(b.extract_element(total, _c32(0)), b.extract_element(total, _c32(1))),
        b.fadd(b.extract_element(total, _c32(2)), b.extract_element(total, _c32(3))),
    )
    s = _warp_sum(b, s)
    lane = b.and_(tid32, _c32(31))
    warp = b.lshr(tid32, _c32(5))
    b.cbranch(b.icmp_unsigned("==", lane, _c32(0)), blocks["lane0"], blocks["after_lane0"])
    b.position_at_end(blocks["lane0"])
    T.store(b, s, smem, warp)
    b.branch(blocks["after_lane0"])

    b.position_at_end(blocks["after_lane0"])
    T.barrier(b)
    b.cbranch(b.icmp_unsigned("==", warp, _c32(0)), blocks["warp0"], blocks["done"])
    b.position_at_end(blocks["warp0"])
    nwarps = b.lshr(b.add(ntid32, _c32(31)), _c32(5))
    has = b.icmp_unsigned("<", lane, nwarps)
    partial = T.load(b, smem, b.select(has, lane, _c32(0)), F32)
    t = _warp_sum(b, b.select(has, partial, ir.Constant(F32, 0.0)))
    b.cbranch(b.icmp_unsigned("==", lane, _c32(0)), blocks["write"], blocks["done"])
    b.position_at_end(blocks["write"])
    b.store(t, _gep(b, out, row), align=4)
    b.branch(blocks["done"])

    b.position_at_end(blocks["done"])
    b.ret_void()
    return m
