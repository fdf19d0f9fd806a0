"""tilec's cold compile against Triton's in pairs, one of each in turn: both sides timed at the same machine speed.

    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_cold_pairs [--pairs 40] [--out DIR] [--target sm_90]
    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_cold_pairs --no-gpu [--target sm_90] ...

bench/tilec_compile.py times all of tilec's cold samples and then all of Triton's. On the GPU runner the CPU
runs at one of two speeds about 1.4x apart, changing within seconds whatever the process holds
(reports/tilec-process-state-h200-2026-11-28/), so a ratio of medians taken seconds apart says partly which
speed each side drew. Here, in one process (torch, a CUDA context, tilec, Triton; both warmed by compiling
another kernel first), each pair is one cold compile of each, back to back, the order swapping every pair:
tilec as the cold bench's default row times it (the module built, then `tilec.compile` with the default
assembler into an empty cache directory), Triton's as its cold row (`triton.compile` of the kernel's first
specialization again, with `always_compile`). Kernels and Triton twins as in tilec_compile (vadd_v8 against
Triton's vadd at BLOCK 1024, four warps: eight elements a thread, as vadd_v8; vadd_v8_m4, whose last block goes
by whole vectors as Triton's masks them, and vadd_v8_flat, the same in one path as Triton's lowers, are context).
Prints per kernel the median of the pairs' ratios with its quartiles, and each side's median; writes
OUT/bench-cold-pairs.json.

Each pair also times, third, tilec's in-process assembler (nvPTXCompiler, where it is the default) on Triton's
own PTX of the twin with Triton's ptxas options: the assembly alone of the same kernel, however its PTX was made.
Its ratio to Triton's whole compile is a floor under any compiler that assembles with that library.

--no-gpu: neither compiler needs a device to compile, so the pairs run on any machine with tilec and Triton
(no torch): Triton compiles each twin as its JIT does for the bench's sizes (`device_free_twins`; the gpu tier
checks that the two compiles hash the same), for --target (default sm_90). The ratios are that machine's.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib
from bench.tilec_compile import (
    TILEC_KERNELS,
    TRITON_BLOCK,
    TRITON_TWIN,
    goal,
    tilec_module,
    tilec_settings,
    triton_specialization,
)


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def device_free_twins(target: str) -> dict[str, tuple[Any, Any, Any]]:
    """Each Triton twin's (src, target, options) as its JIT makes them for the bench's sizes (every pointer and
    n divisible by 16; BLOCK fixed), for `target` (sm_XX) without a device. tests/gpu/test_bench_twins_gpu.py
    checks them against the JIT's on a GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from bench import tilec_triton

    # The JIT's attributes for the bench's arguments: torch's pointers and n = 2^20 are divisible by 16; iters
    # (8) is an integer it specializes on with no attribute (an empty list, which the kernel's hash counts);
    # a float gets no entry.
    d16 = [["tt.divisibility", 16]]
    signatures = {
        "vadd": (tilec_triton.vadd, {"a": "*fp32", "b": "*fp32", "out": "*fp32", "n": "i32"},
                 {0: d16, 1: d16, 2: d16, 3: d16}),
        "expsin": (tilec_triton.expsin, {"x": "*fp32", "y": "*fp32", "scale": "fp32", "iters": "i32", "n": "i32"},
                   {0: d16, 1: d16, 3: [], 4: d16}),
    }
    gpu = GPUTarget("cuda", int(target.removeprefix("sm_")), 32)
    twins = {}
    for name, (fn, signature, attrs) in signatures.items():
        src = ASTSource(fn=fn, signature={**signature, "BLOCK": "constexpr"}, constexprs={"BLOCK": TRITON_BLOCK[name]},
                        attrs={(i,): a for i, a in attrs.items()})
        twins[name] = (src, gpu, {})
    return twins


# Triton's ptxas options for a kernel without its debug knobs (triton/backends/nvidia/compiler.py, make_cubin),
# less the output file; --gpu-name is read from the PTX
TRITON_PTXAS_OPTIONS = ("-lineinfo", "-v")


def triton_ptx_in_process(shim: Any, kernel: Any) -> Callable[[], float]:
    """A timer of one assembly of Triton's `kernel`'s own PTX through tilec's shim of nvPTXCompiler, with
    Triton's options; SystemExit if the library refuses it."""
    ptx = str(kernel.asm["ptx"])
    arch = re.search(r"^\.target\s+(\w+)", ptx, re.MULTILINE)
    if arch is None:
        raise SystemExit("Triton's PTX names no .target")
    options = [*TRITON_PTXAS_OPTIONS, f"--gpu-name={arch.group(1)}"]
    data = ptx.encode()

    def once() -> float:
        t0 = time.perf_counter()
        rc, _cubin, _info, error = shim.compile(data, options)
        took = time.perf_counter() - t0
        if rc != 0:
            raise SystemExit(f"nvPTXCompiler refused Triton's PTX ({rc}): {error.strip()}")
        return took

    return once


def pairs(n: int, target: str, work: Path, twins: dict[str, tuple[Any, Any, Any]] | None = None) -> dict[str, Any]:
    """`n` pairs per kernel. `twins`: each Triton twin's (src, target, options) where this process has compiled it
    already (its JIT would not compile it again to show them), or `device_free_twins`; else they are taken from a
    first compile here (on the GPU)."""
    import tilec
    import triton
    from triton import knobs

    if twins is None:
        twins = {name: triton_specialization(name)[:3] for name in set(TRITON_TWIN.values())}
    warm = tilec.compile(tilec_module("warmup"), target=target, settings=tilec_settings(None))
    out: dict[str, Any] = {"default_assembler": warm.metadata.assembler, "kernels": {}}
    knobs.compilation.always_compile = True
    try:
        # Triton's one-time initialisation, out of the numbers (each kernel's first pair is not a sample either)
        compiled = {tw: triton.compile(src, target=tgt, options=options) for tw, (src, tgt, options) in twins.items()}
        shim = lib.nvptxcompiler_shim()[1] if out["default_assembler"] == "nvptxcompiler" else None
        for name in TILEC_KERNELS:
            src, tgt, options = twins[TRITON_TWIN[name]]
            tl_s: list[float] = []
            tr_s: list[float] = []
            in_process = None if shim is None else triton_ptx_in_process(shim, compiled[TRITON_TWIN[name]])
            ip_s: list[float] = []

            def one_tilec(i: int, _name: str = name, _out: list[float] = tl_s) -> None:
                t0 = time.perf_counter()
                k = tilec.compile(tilec_module(_name), target=target, settings=tilec_settings(work / f"{_name}-{i}"))
                _out.append(time.perf_counter() - t0)
                assert k.cache_status == "miss", k.cache_status

            def one_triton(_src: Any = src, _tgt: Any = tgt, _opts: Any = options, _out: list[float] = tr_s) -> None:
                t0 = time.perf_counter()
                triton.compile(_src, target=_tgt, options=_opts)
                _out.append(time.perf_counter() - t0)

            one_tilec(-1)  # each kernel's first compile in the process is not a sample
            one_triton()
            tl_s.clear()
            tr_s.clear()
            for i in range(n):
                if i % 2:
                    one_triton()
                    one_tilec(i)
                else:
                    one_tilec(i)
                    one_triton()
                if in_process is not None:
                    ip_s.append(in_process())
            ratio = [a / b for a, b in zip(tl_s, tr_s, strict=True)]
            out["kernels"][name] = {"triton_twin": TRITON_TWIN[name], "tilec_s": tl_s, "triton_s": tr_s, "ratio": ratio}
            if in_process is not None:
                out["kernels"][name]["triton_ptx_in_process_s"] = ip_s
                out["kernels"][name]["triton_ptx_in_process_ratio"] = [a / b for a, b in zip(ip_s, tr_s, strict=True)]
    finally:
        knobs.compilation.always_compile = False
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--target", help="sm_XX (default: the GPU's; sm_90 with --no-gpu)")
    ap.add_argument("--no-gpu", action="store_true", help="no device: Triton compiles its twins for --target")
    args = ap.parse_args()
    if args.pairs < 4:
        ap.error("--pairs must be at least 4 (the quartiles need them)")
    target = args.target or ("sm_90" if args.no_gpu else lib.sm_target())
    with tempfile.TemporaryDirectory(prefix="tilec-pairs-") as tmp:
        res = pairs(args.pairs, target, Path(tmp), device_free_twins(target) if args.no_gpu else None)
    res = {"bench": "tilec-cold-pairs", "machine": lib.machine(), "target": target, "pairs": args.pairs,
           "device": "none (--no-gpu)" if args.no_gpu else "the GPU's", **res}
    m = res["machine"]
    where = m.get("gpu") or f"no GPU ({m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores)"
    print(f"{where}, {target}, tilec's default assembler: {res['default_assembler']}; "
          f"{args.pairs} pairs per kernel (ms; ratio tilec / Triton per pair)")
    rows = []
    for name, r in res["kernels"].items():
        q1, med, q3 = quartiles(r["ratio"])
        r["ratio_quartiles"] = [q1, med, q3]
        floor: list[Any] = ["-", "-"]
        if "triton_ptx_in_process_s" in r:
            f1, fmed, f3 = quartiles(r["triton_ptx_in_process_ratio"])
            r["triton_ptx_in_process_ratio_quartiles"] = [f1, fmed, f3]
            floor = [statistics.median(r["triton_ptx_in_process_s"]) * 1e3, f"{fmed:.3f} ({f1:.3f}-{f3:.3f})"]
        rows.append([f"{name} (Triton's {r['triton_twin']})", statistics.median(r["tilec_s"]) * 1e3,
                     statistics.median(r["triton_s"]) * 1e3, med, f"{q1:.3f}-{q3:.3f}", *goal(name, med), *floor])
    print(lib.table(["kernel", "tilec", "Triton", "ratio (median of pairs)", "quartiles", "goal", "verdict",
                     "Triton's PTX in process", "its ratio (quartiles)"], rows))
    lib.save(args.out, "bench-cold-pairs.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
