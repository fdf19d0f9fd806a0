"""tilec's cold compile with its heap pad (TILEC_HEAP_PAD_MIB) and without, side by side. No GPU.

    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_heap_pad [--rounds 3] [--reps 30] [--out DIR] [--target sm_90]

An in-process assembly (nvPTXCompiler, nvJitLink) frees a few MiB at its end; unless glibc keeps them, the
next compile faults them in again (src/compiler/tilec/backends/cuda/heap.py). For each bench kernel (vadd,
vadd_v8, expsin: tilec_kernels.py), each round runs two fresh processes, one with TILEC_HEAP_PAD_MIB=0 (glibc's
malloc as the process has it) and one with tilec's default, taking turns which goes first; each compiles the
kernel --reps times back to back (cache off, the default assembler, after three unmeasured compiles) and
reports the median compile, each stage's median and the median page faults per compile (getrusage's minor
faults). Prints, per kernel, every round and the medians over rounds, with the ratio pad/none. Writes
OUT/bench-heap-pad.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from bench import tilec_benchlib as lib

KERNELS = ("vadd", "vadd_v8", "expsin")
MODES = {"none": "0", "pad": ""}  # TILEC_HEAP_PAD_MIB for each; "" is tilec's default


def child(kernel: str, reps: int, target: str) -> dict[str, Any]:
    """In this process: `reps` cold compiles of `kernel`, after three unmeasured ones."""
    import tilec

    from bench.tilec_compile import stage_clock, tilec_module, tilec_settings

    settings = tilec_settings(None)
    times: list[float] = []
    faults: list[int] = []
    stages: dict[str, list[float]] = {}
    k = None
    for n in range(reps + 3):
        module = tilec_module(kernel)
        with stage_clock() as inside:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            k = tilec.compile(module, target=f"cuda:{target}", settings=settings)
            took = time.perf_counter() - t0
            faulted = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        if n >= 3:
            times.append(took)
            faults.append(faulted)
            for stage, s in inside.items():
                stages.setdefault(stage, []).append(s)
    assert k is not None
    from tilec.backends.cuda import heap

    return {"compile_ms": statistics.median(times) * 1e3, "faults_per_compile": statistics.median(faults),
            "stages_ms": {s: statistics.median(v) * 1e3 for s, v in stages.items()},
            "assembler": k.metadata.assembler, "heap": heap.state(settings)}


def run_child(kernel: str, mode: str, reps: int, target: str) -> dict[str, Any]:
    env = {**os.environ, "TILEC_HEAP_PAD_MIB": MODES[mode]}
    cmd = [sys.executable, "-m", "bench.tilec_heap_pad", "--child", kernel, "--reps", str(reps), "--target", target]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{kernel} ({mode}) failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--child", choices=KERNELS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.reps, args.target)))
        return 0
    res: dict[str, Any] = {"bench": "tilec-heap-pad", "machine": lib.machine(), "target": args.target,
                           "reps": args.reps, "rounds": args.rounds, "kernels": {}}
    rows = []
    for kernel in KERNELS:
        runs: dict[str, list[dict[str, Any]]] = {"none": [], "pad": []}
        for r in range(args.rounds):
            order = ("none", "pad") if r % 2 == 0 else ("pad", "none")
            for mode in order:
                runs[mode].append(run_child(kernel, mode, args.reps, args.target))
                got = runs[mode][-1]
                print(f"  {kernel:8s} round {r + 1} {mode:4s} {got['compile_ms']:7.2f} ms"
                      f"  {got['faults_per_compile']:6.0f} faults/compile  ({got['assembler']}; heap: {got['heap']})",
                      flush=True)
        med = {m: statistics.median(x["compile_ms"] for x in v) for m, v in runs.items()}
        flt = {m: statistics.median(x["faults_per_compile"] for x in v) for m, v in runs.items()}
        res["kernels"][kernel] = {"runs": runs, "median_compile_ms": med, "median_faults_per_compile": flt,
                                  "ratio_pad_to_none": med["pad"] / med["none"]}
        rows.append([kernel, f"{med['none']:.2f}", f"{med['pad']:.2f}", f"{med['pad'] / med['none']:.2f}",
                     f"{flt['none']:.0f}", f"{flt['pad']:.0f}", runs["pad"][0]["assembler"]])
    print(f"\ncold compile, medians over {args.rounds} rounds of {args.reps} compiles each (ms)")
    print(lib.table(["kernel", "no pad", "pad", "pad/none", "faults (no pad)", "faults (pad)", "assembler"], rows))
    lib.save(args.out, "bench-heap-pad.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
