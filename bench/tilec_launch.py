"""Host launch overhead per launch: tilec's launch, raw cuLaunchKernel, Triton, the AOT launcher.

    python3 -m bench.tilec_launch [--out DIR] [--launches 500] [--reps 21]
    python3 -m bench.tilec_launch --only pack      # no GPU: native vs Python argument packing

tilec launches through its native launcher (tilec._launch: C++ packing, cuLaunchKernel with
the GIL released) and, beside it, through the Python packer and cuda-python
(TILEC_NATIVE_LAUNCH=0), the path it replaced.

One tiny kernel (vector add over 256 floats, one block) launched many times in a row on
the default stream, timed on the host around the launch loop; a synchronize only at the
end of each batch (outside the loop's time, reported beside it). Batches of 500 stay
under the driver's queue of pending launches, so the loop measures the host, not the
GPU. Variants are interleaved batch by batch; the figure is the median batch.

The AOT C launcher (`tilec aot`, when this tilec has it) is timed from C, beside a raw
cuLaunchKernel loop in the same C program: tilec_aot_bench.c.

Writes bench-launch.json; prints a table of ratios last.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib

N = 256


def build(res: dict[str, Any]) -> dict[str, Any]:
    import tilec
    import torch
    from cuda.bindings import driver as cu

    from bench import tilec_kernels as K
    from bench import tilec_triton

    torch.cuda.init()
    a = torch.randn(N, device="cuda")
    b = torch.randn(N, device="cuda")
    out = torch.full((N,), float("nan"), device="cuda")
    ref = a + b
    k = tilec.compile(K.vadd_scalar(tilec.ir), target=lib.sm_target())
    if k.native_launcher() is None:
        raise RuntimeError("this tilec has no native launcher (tilec._launch was not built)")
    py_settings = dataclasses.replace(tilec.Settings.from_env(), native_launch=False)
    k_py = tilec.compile(K.vadd_scalar(tilec.ir), target=lib.sm_target(), settings=py_settings)
    pa, pb, po = a.data_ptr(), b.data_ptr(), out.data_ptr()
    fn = k._function()  # loaded CUfunction (the same one tilec launches)
    vals = [ctypes.c_uint64(pa), ctypes.c_uint64(pb), ctypes.c_uint64(po), ctypes.c_uint32(N)]
    params = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in vals])
    addr = ctypes.addressof(params)
    stream = cu.CUstream(0)
    ok = cu.CUresult.CUDA_SUCCESS
    launcher = k[1, N]
    tri = tilec_triton.vadd

    def raw() -> None:
        (err,) = cu.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, stream, addr, 0)
        if err != ok:
            raise RuntimeError(err)

    typed = ((pa, pb, po, N), (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32))

    def raw_tuples() -> None:
        (err,) = cu.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, stream, typed, 0)
        if err != ok:
            raise RuntimeError(err)

    variants: dict[str, Callable[[], Any]] = {
        "tilec k[grid, block](tensors)": lambda: k[1, N](a, b, out, N),
        "tilec prebound launcher(tensors)": lambda: launcher(a, b, out, N),
        "tilec k[grid, block](int pointers)": lambda: k[1, N](pa, pb, po, N),
        "tilec Python path k[grid, block](tensors) (TILEC_NATIVE_LAUNCH=0)": lambda: k_py[1, N](a, b, out, N),
        "raw cuLaunchKernel (cuda-python, packed params)": raw,
        "raw cuLaunchKernel (cuda-python, arg tuples)": raw_tuples,
        "triton kernel[grid](tensors)": lambda: tri[(1,)](a, b, out, N, BLOCK=N),
    }
    # Correctness of every variant before any timing: poisoned output, fresh inputs.
    checked: dict[str, str] = {}
    for name, launch in list(variants.items()):
        try:
            a.copy_(torch.randn(N, device="cuda"))
            b.copy_(torch.randn(N, device="cuda"))
            ref = a + b
            out.fill_(float("nan"))
            torch.cuda.synchronize()
            launch()
            torch.cuda.synchronize()
            if not torch.equal(out, ref):
                raise AssertionError("result differs from a + b")
            checked[name] = "ok"
        except Exception as exc:
            checked[name] = f"dropped: {exc!r}"
            del variants[name]
    res["correctness"] = checked
    res["tilec_ptx_ops"] = lib.ptx_ops(k.asm["ptx"])
    # Whether the native launcher reads torch tensors through DLPack's C exchange table (one C
    # call each) or through is_cuda, get_device() and data_ptr() (torch before 2.10).
    uses_table = getattr(tilec._launch, "uses_dlpack_table", None)
    res["torch_tensor_via_dlpack_table"] = None if uses_table is None else uses_table(torch.Tensor)
    return {
        "variants": variants,
        "k": k,
        "k_py": k_py,
        "tensors": (a, b, out),
        "ptrs": (pa, pb, po),
        "raw": raw,
        "keepalive": (vals, params, typed),  # cuLaunchKernel reads these addresses
    }


def measure(variants: dict[str, Callable[[], Any]], launches: int, reps: int) -> dict[str, Any]:
    import torch

    loop: dict[str, list[float]] = {n: [] for n in variants}
    total: dict[str, list[float]] = {n: [] for n in variants}
    for launch in variants.values():  # warm-up: every path compiled, loaded, cached
        for _ in range(200):
            launch()
    torch.cuda.synchronize()
    for _ in range(reps):
        for name, launch in variants.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(launches):
                launch()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            loop[name].append((t1 - t0) / launches)
            total[name].append((t2 - t0) / launches)
    return {n: {"per_launch_s": lib.stats(loop[n]), "per_launch_incl_sync_s": lib.stats(total[n])} for n in variants}


def breakdown(ctx: dict[str, Any]) -> dict[str, float]:
    """Where tilec's per-launch time goes: each piece of a launch timed alone."""
    from tilec.backends.cuda import driver, launch

    k = ctx["k"]
    a, b, out = ctx["tensors"]
    pa, pb, po = ctx["ptrs"]
    sig = k.signature
    native = k.native_launcher()
    reps = 20000

    def per_call(stmt: Callable[[], Any]) -> float:
        return min(timeit.repeat(stmt, number=reps, repeat=5)) / reps

    return {
        "k[grid, block] (a remembered configuration)": per_call(lambda: k[1, N]),
        "native pack(tensors) (checks + packing in C++, bytes out)": per_call(lambda: native.pack((a, b, out, N), 0)),
        "native pack(int pointers)": per_call(lambda: native.pack((pa, pb, po, N), 0)),
        "Python pack_args(tensors)": per_call(lambda: launch.pack_args(sig, (a, b, out, N), 0)),
        "Python pack_args(int pointers)": per_call(lambda: launch.pack_args(sig, (pa, pb, po, N), 0)),
        "tensor.__cuda_array_interface__ (one tensor)": per_call(lambda: a.__cuda_array_interface__),
        "tensor.data_ptr() (one tensor)": per_call(lambda: a.data_ptr()),
        "tensor.device (one tensor)": per_call(lambda: a.device),
        "CompiledKernel._function() (Python path: context check + lookup)": per_call(k._function),
        "driver.as_stream(None) (Python path)": per_call(lambda: driver.as_stream(None)),
        "cuLaunchKernel (raw, packed, cuda-python)": per_call(ctx["raw"]),
    }


def pack_only(a: argparse.Namespace) -> int:
    """No GPU: the native packer against the Python one, on torch-like objects and ints.
    The objects are Python classes, so data_ptr() and .device cost more than torch's."""
    import platform

    import tilec
    from tilec.backends.cuda import launch

    class Device:
        type = "cuda"
        index = 0

    class Tensor:
        device = Device()

        def __init__(self, ptr: int) -> None:
            self._ptr = ptr

        def data_ptr(self) -> int:
            return self._ptr

    sig = tilec.launch.Signature.from_llvm("vadd", ["ptr addrspace(1)"] * 3 + ["i32"], ["a", "b", "out", "n"])
    native = launch.native_launcher(sig, lambda: None)
    if native is None:
        raise SystemExit("tilec._launch is not built")
    tensors = (Tensor(0x1000), Tensor(0x2000), Tensor(0x3000), N)
    ints = (0x1000, 0x2000, 0x3000, N)
    assert native.pack(tensors, 0) == launch.pack_bytes(sig, tensors, 0)
    reps = 20000

    def per_call(stmt: Callable[[], Any]) -> float:
        return min(timeit.repeat(stmt, number=reps, repeat=7)) / reps

    res = {
        "bench": "launch-pack",
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0]},
        "per_call_s": {
            "native pack (tensor-likes)": per_call(lambda: native.pack(tensors, 0)),
            "Python pack_args (tensor-likes)": per_call(lambda: launch.pack_args(sig, tensors, 0)),
            "native pack (ints)": per_call(lambda: native.pack(ints, 0)),
            "Python pack_args (ints)": per_call(lambda: launch.pack_args(sig, ints, 0)),
        },
    }
    path = lib.out_dir(a.out) / "bench-launch-pack.json"
    lib.write_json(path, res)
    print(f"wrote {path}")
    print(lib.table(["packing", "us/call"], [[n, v * 1e6] for n, v in res["per_call_s"].items()]))
    return 0


# --------------------------------------------------------------------------- AOT (C)
AOT_C = Path(__file__).resolve().parent / "tilec_aot_bench.c"


def aot(res: dict[str, Any], launches: int, reps: int) -> dict[str, Any]:
    """`tilec aot` for the same kernel, linked into tilec_aot_bench.c beside raw cuLaunchKernel."""
    import json

    import tilec

    try:
        tilec_aot = importlib.import_module("tilec.aot")
    except ImportError:
        try:  # where it lived before it moved beside the driver (a baseline wheel may be that old)
            tilec_aot = importlib.import_module("tilec.backends.cuda.aot")
        except ImportError as exc:
            return {"status": "not measured", "why": f"this tilec has no AOT launcher ({exc})"}
    from bench import tilec_kernels as K

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return {"status": "not measured", "why": "no C compiler on the machine"}
    work = Path(tempfile.mkdtemp(prefix="tilec-aot-"))
    major, minor = lib.sm_target()[3:-1], lib.sm_target()[-1]
    kern = tilec_aot.compile(K.vadd_scalar(tilec.ir), target=f"cuda:{major}{minor}", block=N, name="vadd_aot")
    written = [Path(p) for p in kern.write(work)]
    sources = [str(p) for p in written if p.suffix == ".c"]
    header = next(p.name for p in written if p.suffix == ".h")
    exe = work / "aot_bench"
    cmd = [
        cc,
        "-O2",
        f'-DAOT_HEADER="{header}"',
        "-DAOT_FN=vadd_aot",
        "-DAOT_FN_FUNCTION=vadd_aot_function",
        "-o",
        str(exe),
        str(AOT_C),
        *sources,
        f"-I{work}",
        "-I/usr/local/cuda/include",
        "-L/usr/local/cuda/lib64/stubs",
        "-L/usr/local/cuda/lib64",
        "-lcuda",
        "-lpthread",
    ]
    built = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"building the AOT bench failed: {' '.join(cmd)}\n{built.stderr[-3000:]}")
    proc = subprocess.run([str(exe), str(launches), str(reps)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"aot_bench failed ({proc.returncode}): {proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"status": "measured", "header": header, **out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--launches", type=int, default=500)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--only", choices=["pack"], help="pack: native vs Python packing, no GPU")
    a = ap.parse_args()
    if a.only == "pack":
        return pack_only(a)
    import torch

    torch.cuda.init()
    info = lib.machine()
    res: dict[str, Any] = {"bench": "launch", "machine": info, "errors": {}}
    res["method"] = {
        "kernel": f"vector add, {N} float32, grid 1 x block {N}",
        "launches_per_batch": a.launches,
        "batches": a.reps,
        "timing": "host perf_counter around the launch loop; synchronize after each batch, "
        "outside the loop time (also reported incl. sync); variants interleaved batch by batch",
    }
    errors: dict[str, str] = res["errors"]
    ctx: dict[str, Any] = {}
    with lib.section("build and check", errors):
        ctx = build(res)
    with lib.section("launch loops", errors):
        res["results"] = measure(ctx["variants"], a.launches, a.reps)
    with lib.section("tilec launch breakdown", errors):
        res["tilec_breakdown_s"] = breakdown(ctx)
    with lib.section("AOT launcher", errors):
        res["aot"] = aot(res, a.launches, a.reps)

    r = res.get("results", {})

    def us(name: str) -> float | None:
        v = r.get(name, {}).get("per_launch_s", {}).get("median")
        return None if v is None else v * 1e6

    tri = us("triton kernel[grid](tensors)")
    raw = us("raw cuLaunchKernel (cuda-python, packed params)")
    rows: list[list[Any]] = []
    for name in r:
        v = us(name)
        assert v is not None
        goal, verdict = "-", "-"
        if name == "tilec k[grid, block](tensors)" and tri and raw:
            goal = "<= 0.333 x triton and <= 1.5 x raw"
            met = lib.verdict(v / tri, 1 / 3) == "met" and lib.verdict(v / raw, 1.5) == "met"
            verdict = "met" if met else "missed"
        rows.append([name, v, v / tri if tri else "-", v / raw if raw else "-", goal, verdict])
    aot_r = res.get("aot", {})
    if aot_r.get("status") == "measured":
        ratio = aot_r["aot_over_raw"]
        rows.append(
            ["raw cuLaunchKernel (from C)", aot_r["raw_us"], aot_r["raw_us"] / tri if tri else "-", "-", "-", "-"]
        )
        rows.append(
            [
                "AOT C launcher (from C; x raw = vs raw from C)",
                aot_r["aot_us"],
                aot_r["aot_us"] / tri if tri else "-",
                ratio,
                "<= 1.10 x raw (C)",
                lib.verdict(ratio, 1.10),
            ]
        )
    else:
        rows.append(["AOT C launcher", "not measured", "-", "-", "<= 1.10 x raw", aot_r.get("why", "not measured")])
    res["ratios"] = [
        dict(zip(("what", "us_per_launch", "vs_triton", "vs_raw", "goal", "verdict"), row, strict=True)) for row in rows
    ]
    path = lib.out_dir(a.out) / "bench-launch.json"
    lib.write_json(path, res)
    print(f"wrote {path}")
    print(f"GPU: {info.get('gpu')}  CPU: {info.get('cpu')}")
    print(lib.table(["launch path", "us/launch", "x triton", "x raw", "goal", "verdict"], rows))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
