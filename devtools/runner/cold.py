"""tilec's cold compile with two wheels that took turns (--compare-host, --cold-ab): the rounds pooled, as ratios."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

# The stages of a cold compile that run the LLVM under test: llvmlite prints the IR (ir_text) and
# ptxas assembles (cubin) with the same bits whichever LLVM the wheel holds.
LLVM_STAGES = ("llir", "llir_opt", "ptx")


def _cold_runs(out: Path, name: str, part: str = "cold_tilec") -> list[dict[str, Any]]:
    """bench/tilec_compile.py's cold_tilec (or `part`) of every round with NAME's wheel (one run: cold-NAME/
    itself)."""
    base = out / f"cold-{name}"
    paths = sorted(base.glob("round-*/bench-compile.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not paths and (base / "bench-compile.json").is_file():
        paths = [base / "bench-compile.json"]
    return [json.loads(p.read_text()).get(part) or {} for p in paths]


def _cold_summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kernel: the median of every round's cold IR->cubin samples pooled, and the median over rounds
    of the LLVM stages' sum (each round's stage medians)."""
    kernels = sorted({k for run in runs for k, v in run.items() if isinstance(v, dict) and "cold_s" in v})
    summary: dict[str, dict[str, Any]] = {}
    for k in kernels:
        samples = [x for run in runs if k in run for x in run[k]["cold_s"].get("samples", [])]
        stages = [
            sum(run[k]["stages_s"][s] for s in LLVM_STAGES)
            for run in runs
            if k in run and all(isinstance(run[k].get("stages_s", {}).get(s), float) for s in LLVM_STAGES)
        ]
        summary[k] = {
            "cold_s": statistics.median(samples) if samples else None,
            "cold_samples": len(samples),
            "llvm_stages_s": statistics.median(stages) if stages else None,
            "rounds": len(stages),
        }
    return summary


def _ratios(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]], field: str) -> dict[str, float]:
    return {k: round(a[k][field] / b[k][field], 3) for k in a if a[k].get(field) and (b.get(k) or {}).get(field)}


def compare_host(out: Path, pinned: dict[str, Any] | None, host: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The pinned toolchain's build against the host compiler's, on this machine in this run (ratios: pinned/host)."""
    if host is None:
        return None
    a, b = (pinned or {}).get("wall_time_s"), host.get("wall_time_s")
    runs_pinned, runs_host = _cold_runs(out, name), _cold_runs(out, "host")
    cold_pinned, cold_host = _cold_summary(runs_pinned), _cold_summary(runs_host)
    return {
        "toolchains": {"pinned": name, "other": "host"},
        "llvm_wall_time_s": {"pinned": a, "host": b},
        "llvm_build_ratio": round(a / b, 3) if a and b else None,
        "host_tree_digest": host.get("tree_digest"),
        "cold_rounds": {"pinned": len(runs_pinned), "host": len(runs_host)},
        "cold_compile_median_s": {
            "pinned": {k: v["cold_s"] for k, v in cold_pinned.items()},
            "host": {k: v["cold_s"] for k, v in cold_host.items()},
        },
        "cold_compile_ratio": _ratios(cold_pinned, cold_host, "cold_s"),
        "llvm_stages_median_s": {
            "stages": list(LLVM_STAGES),
            "pinned": {k: v["llvm_stages_s"] for k, v in cold_pinned.items()},
            "host": {k: v["llvm_stages_s"] for k, v in cold_host.items()},
        },
        "llvm_stages_ratio": _ratios(cold_pinned, cold_host, "llvm_stages_s"),
        "goal": "cold compile with the pinned toolchain's LLVM at most 1.05x the host-built LLVM's",
    }


def cold_ab(out: Path) -> dict[str, Any] | None:
    """--cold-ab: tilec's cold compile with this wheel and with the baseline's, taking turns on this machine
    (ratios: this/baseline, and each against Triton's cold compile in the same rounds)."""
    runs_this, runs_base = _cold_runs(out, "this"), _cold_runs(out, "baseline")
    if not runs_this and not runs_base:
        return None
    this, base = _cold_summary(runs_this), _cold_summary(runs_base)
    triton = _cold_summary(_cold_runs(out, "this", "cold_triton") + _cold_runs(out, "baseline", "cold_triton"))
    # Triton's kernel each of tilec's is measured against (bench/tilec_compile.py's ratios)
    against = {k: "vadd" if k.startswith("vadd") else k for k in {**this, **base}}
    return {
        "rounds": {"this": len(runs_this), "baseline": len(runs_base)},
        "cold_compile_median_s": {
            "this": {k: v["cold_s"] for k, v in this.items()},
            "baseline": {k: v["cold_s"] for k, v in base.items()},
            "triton": {k: v["cold_s"] for k, v in triton.items()},
        },
        "cold_compile_ratio": _ratios(this, base, "cold_s"),
        "against_triton": {
            name: {k: round(v["cold_s"] / triton[t]["cold_s"], 3) for k, v in side.items()
                   if v.get("cold_s") and (t := against[k]) in triton and triton[t].get("cold_s")}
            for name, side in (("this", this), ("baseline", base))
        },
    }
