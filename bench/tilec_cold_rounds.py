"""tilec's cold compile against Triton's, several rounds back to back: per-round ratios and their medians.

    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_cold_rounds [--rounds 4] [--out DIR] [--target sm_90]\
        [--against VAR=VALUE]

One run of `bench.tilec_compile --only cold` times tilec and then Triton, each over its reps; on the GPU
runner Triton's own cold compile moved by a third from one run to the next
(reports/tilec-assembler-floor-h100-2026-11-28/), and the machine's speed moves by up to 1.8x over seconds
(reports/tilec-process-state-h200-2026-11-28/), so a single run's ratio says more about when it ran than
about the compilers. bench/tilec_cold_pairs.py takes one sample of each in turn instead. This runs it --rounds times, each in its own process and directory (OUT/round-N), and
prints, for each kernel with the default assembler, every round's tilec and Triton times and ratio, and the
median of the ratios. `--against VAR=VALUE` (repeatable) also runs each round with those in the environment
(OUT/against-N), taking turns which goes first, and prints its medians beside. Writes
OUT/bench-cold-rounds.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib

PREFIX = "cold IR->cubin "
DEFAULT = ", default"


def round_ratios(path: Path) -> dict[str, dict[str, float]]:
    """kernel -> {tilec, triton, ratio} (ms) of the default assembler's row in one run's bench-compile.json."""
    found = {}
    for row in json.loads(path.read_text())["ratios"]:
        what = str(row["what"])
        if what.startswith(PREFIX) and DEFAULT in what:
            kernel = what[len(PREFIX) : what.index(DEFAULT)]
            found[kernel] = {"tilec": row["tilec"], "triton": row["triton"], "ratio": row["ratio"]}
    return found


def one_round(where: Path, target: str | None, env: dict[str, str] | None) -> dict[str, dict[str, float]]:
    where.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "bench.tilec_compile", "--only", "cold", "--out", str(where)]
    if target:
        cmd += ["--target", target]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
    (where / "out.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (where / "bench-compile.json").is_file():
        raise SystemExit(f"{where.name} failed (exit {proc.returncode}); its output: {where / 'out.txt'}")
    return round_ratios(where / "bench-compile.json")


def summary(rounds: list[dict[str, dict[str, float]]], label: str) -> dict[str, float]:
    kernels = list(rounds[0])
    median = {k: statistics.median(r[k]["ratio"] for r in rounds) for k in kernels}
    rows = [[n + 1, *(f"{r[k]['tilec']:.1f} / {r[k]['triton']:.1f} = {r[k]['ratio']:.2f}" for k in kernels)]
            for n, r in enumerate(rounds)]
    rows.append(["median", *(f"{median[k]:.3f}" for k in kernels)])
    print(f"\n{label}")
    print(lib.table(["round", *(f"{k} (ms, tilec / Triton)" for k in kernels)], rows))
    return median


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--target", help="sm_XX (default: device 0's)")
    ap.add_argument("--against", metavar="VAR=VALUE", action="append", default=[],
                    help="also run each round with these in the environment, taking turns which goes first")
    args = ap.parse_args()
    if any("=" not in a for a in args.against):
        ap.error(f"--against takes VAR=VALUE, got {[a for a in args.against if '=' not in a]}")
    against = dict(a.split("=", 1) for a in args.against)
    out = lib.out_dir(args.out)
    rounds: list[dict[str, dict[str, float]]] = []
    other: list[dict[str, dict[str, float]]] = []
    for n in range(1, args.rounds + 1):
        print(f"== round {n} of {args.rounds}", flush=True)
        turns = [("round", None), ("against", against)] if against else [("round", None)]
        for name, env in turns if n % 2 else reversed(turns):
            (other if env else rounds).append(one_round(out / f"{name}-{n}", args.target, env))
    res: dict[str, Any] = {"bench": "tilec-cold-rounds", "rounds": rounds,
                           "median_ratio": summary(rounds, "as is")}
    if against:
        label = "with " + " ".join(f"{k}={v}" for k, v in against.items())
        res.update(against=against, against_rounds=other, against_median_ratio=summary(other, label))
    lib.write_json(out / "bench-cold-rounds.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
