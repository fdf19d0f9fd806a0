"""tilec's cold compile against Triton's, several rounds back to back: per-round ratios and their medians.

    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_cold_rounds [--rounds 4] [--out DIR] [--target sm_90]

One run of `bench.tilec_compile --only cold` times tilec and then Triton, each over its reps; on the GPU
runner Triton's own cold compile moves by a third from one run to the next while tilec's holds
(reports/tilec-assembler-floor-h100-2026-11-28/), so a single run's ratio says more about when it ran than
about the compilers. This runs it --rounds times, each in its own process and directory (OUT/round-N), and
prints, for each kernel with the default assembler, every round's tilec and Triton times and ratio, and the
median of the ratios. Writes OUT/bench-cold-rounds.json.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--target", help="sm_XX (default: device 0's)")
    args = ap.parse_args()
    out = lib.out_dir(args.out)
    rounds: list[dict[str, dict[str, float]]] = []
    for n in range(1, args.rounds + 1):
        where = out / f"round-{n}"
        where.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "bench.tilec_compile", "--only", "cold", "--out", str(where)]
        if args.target:
            cmd += ["--target", args.target]
        print(f"== round {n} of {args.rounds}", flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        (where / "out.txt").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not (where / "bench-compile.json").is_file():
            raise SystemExit(f"round {n} failed (exit {proc.returncode}); its output: {where / 'out.txt'}")
        rounds.append(round_ratios(where / "bench-compile.json"))
    kernels = list(rounds[0])
    res: dict[str, Any] = {"bench": "tilec-cold-rounds", "rounds": rounds,
                           "median_ratio": {k: statistics.median(r[k]["ratio"] for r in rounds) for k in kernels}}
    lib.write_json(out / "bench-cold-rounds.json", res)
    rows = [[n + 1, *(f"{r[k]['tilec']:.1f} / {r[k]['triton']:.1f} = {r[k]['ratio']:.2f}" for k in kernels)]
            for n, r in enumerate(rounds)]
    rows.append(["median", *(f"{res['median_ratio'][k]:.3f}" for k in kernels)])
    print(lib.table(["round", *(f"{k} (ms, tilec / Triton)" for k in kernels)], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
