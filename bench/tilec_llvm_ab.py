"""tilec's LLVM stages (IR -> PTX) with two builds of tilec side by side: a change to the native core, measured. No GPU.

    PYTHONPATH=. python3 -m bench.tilec_llvm_ab --site A_SITE --site B_SITE [--rounds 6] [--reps 25] [--out DIR]

Each round runs one fresh process per site (PYTHONPATH=<site>:<this checkout>), taking turns which goes first;
each compiles every bench kernel (vadd, vadd_v8, expsin: tilec_kernels.py) to PTX --reps times with the cache
off and no assembler (`use_ptxas=False`: the stages llir, llir_opt and ptx, all in the native core), after one
unmeasured compile, and reports each kernel's median compile and each stage's median. Prints every round, and
per kernel the median over rounds of each site with the ratio B/A. Writes OUT/bench-llvm-ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench import tilec_benchlib as lib

KERNELS = ("vadd", "vadd_v8", "expsin")


def child(reps: int, target: str) -> dict[str, Any]:
    """In this process: each kernel to PTX `reps` times, after one unmeasured compile."""
    import tilec

    from bench.tilec_compile import stage_clock, tilec_module, tilec_settings

    settings = tilec_settings(None)
    out: dict[str, Any] = {"tilec": os.path.dirname(tilec.__file__), "kernels": {}}
    for kernel in KERNELS:
        times: list[float] = []
        stages: dict[str, list[float]] = {}
        for n in range(reps + 1):
            module = tilec_module(kernel)
            with stage_clock() as inside:
                t0 = time.perf_counter()
                tilec.compile(module, target=f"cuda:{target}", settings=settings, use_ptxas=False)
                took = time.perf_counter() - t0
            if n:
                times.append(took)
                for stage, s in inside.items():
                    stages.setdefault(stage, []).append(s)
        out["kernels"][kernel] = {"compile_ms": statistics.median(times) * 1e3,
                                  "stages_ms": {s: statistics.median(v) * 1e3 for s, v in stages.items()}}
    return out


def run_child(site: str, reps: int, target: str) -> dict[str, Any]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{here}"}
    cmd = [sys.executable, "-m", "bench.tilec_llvm_ab", "--child", "--reps", str(reps), "--target", target]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the process with {site} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", action="append", default=[], help="a directory holding a tilec package: give two")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.reps, args.target)))
        return 0
    if len(args.site) != 2:
        ap.error("give --site twice: the tilec to compare against (A), then the one measured (B)")
    for site in args.site:
        if not os.path.isfile(os.path.join(site, "tilec", "__init__.py")):
            ap.error(f"--site {site}: no tilec package there (expected {site}/tilec/__init__.py)")
    names = ("A", "B")
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names if r % 2 == 0 else names[::-1]:
            got = run_child(args.site[names.index(n)], args.reps, args.target)
            runs[n].append(got)
            each = "  ".join(f"{k} {v['compile_ms']:6.2f}" for k, v in got["kernels"].items())
            print(f"  round {r + 1} {n}: {each} ms", flush=True)
    res: dict[str, Any] = {"bench": "tilec-llvm-ab", "machine": lib.machine(), "target": args.target,
                           "sites": dict(zip(names, args.site, strict=True)), "rounds": args.rounds,
                           "reps": args.reps, "runs": runs, "kernels": {}}
    rows = []
    for kernel in KERNELS:
        med = {n: statistics.median(x["kernels"][kernel]["compile_ms"] for x in runs[n]) for n in names}
        stages = {n: {s: statistics.median(x["kernels"][kernel]["stages_ms"][s] for x in runs[n])
                      for s in runs[n][0]["kernels"][kernel]["stages_ms"]} for n in names}
        res["kernels"][kernel] = {"median_compile_ms": med, "median_stages_ms": stages, "ratio_b_to_a": med["B"] / med["A"]}
        parts = " / ".join(f"{stages['A'][s]:.2f}->{stages['B'][s]:.2f}" for s in stages["A"])
        rows.append([kernel, f"{med['A']:.2f}", f"{med['B']:.2f}", f"{med['B'] / med['A']:.3f}", parts])
    print(f"\nIR -> PTX, cache off, medians over {args.rounds} rounds of {args.reps} compiles each (ms); "
          f"A = {args.site[0]}, B = {args.site[1]}")
    print(lib.table(["kernel", "A", "B", "B/A", "stages A->B (" + ", ".join(stages["A"]) + ")"], rows))
    lib.save(args.out, "bench-llvm-ab.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
