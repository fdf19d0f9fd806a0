"""Medians over the rounds of this directory's bench-launch runs, this tilec (head-N) against 43afd65's (base-N).

    python3 reports/launch-ab-h100-2026-11-28/ab.py
"""

import json
import statistics as st
from pathlib import Path

here = Path(__file__).parent
runs: dict[str, dict[int, dict[str, dict]]] = {}
for f in sorted(here.glob("*-*.json")):
    who, rnd = f.stem.rsplit("-", 1)
    runs.setdefault(who, {})[int(rnd)] = {r["what"]: r for r in json.loads(f.read_text())["ratios"]}
paths = [
    "tilec k[grid, block](tensors)",
    "tilec prebound launcher(tensors)",
    "tilec k[grid, block](int pointers)",
    "tilec Python path k[grid, block](tensors) (TILEC_NATIVE_LAUNCH=0)",
    "raw cuLaunchKernel (cuda-python, packed params)",
    "triton kernel[grid](tensors)",
]
print(f"{'launch path':<68} {'this us':>8} {'x raw':>6} {'43afd65 us':>10} {'x raw':>6}")
for p in paths:
    cells = []
    for who in ("head", "base"):
        rows = [runs[who][r][p] for r in sorted(runs[who])]
        cells += [st.median(x["us_per_launch"] for x in rows), st.median(x["vs_raw"] for x in rows)]
    print(f"{p:<68} {cells[0]:8.2f} {cells[1]:6.3f} {cells[2]:10.2f} {cells[3]:6.3f}")
main = paths[0]
h = [runs["head"][r][main]["vs_raw"] for r in sorted(runs["head"])]
b = [runs["base"][r][main]["vs_raw"] for r in sorted(runs["base"])]
print(f"rounds: {len(h)}; this tilec's x raw <= 43afd65's in the same round: {sum(x <= y for x, y in zip(h, b))}")
