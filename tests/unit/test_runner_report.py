"""The GPU runner's report: the cold-compile comparison pools the rounds in which the two wheels took turns."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu" / "runner"))
import report

pytestmark = pytest.mark.unit


def write_round(out: Path, name: str, r: int, samples: list[float], stages: dict[str, float]) -> None:
    cold = {"vadd": {"cold_s": {"median": sorted(samples)[len(samples) // 2], "samples": samples}, "stages_s": stages}}
    path = out / f"cold-{name}" / f"round-{r}" / "bench-compile.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"cold_tilec": {"target": "sm_90", **cold}}))


def stages(llir: float, opt: float, ptx: float) -> dict[str, Any]:
    # ir_text (llvmlite) and cubin (ptxas) are the same whichever LLVM: large here, and left out of the LLVM part
    return {"ir_text": 9.0, "llir": llir, "llir_opt": opt, "ptx": ptx, "cubin": 50.0}


def test_rounds_are_pooled_and_the_llvm_stages_compared(tmp_path: Path) -> None:
    # round 1 is a slow stretch for both wheels; pooled medians still compare them fairly
    write_round(tmp_path, "zig", 1, [30.0, 31.0, 32.0], stages(3.0, 3.0, 3.0))
    write_round(tmp_path, "host", 1, [33.0, 34.0, 35.0], stages(4.0, 4.0, 4.0))
    write_round(tmp_path, "zig", 2, [10.0, 11.0, 12.0], stages(1.0, 1.0, 1.0))
    write_round(tmp_path, "host", 2, [9.0, 10.0, 10.5], stages(1.0, 1.0, 2.0))
    got = report.compare_host(tmp_path, {"wall_time_s": 90.0}, {"wall_time_s": 100.0, "tree_digest": "d"}, "zig")
    assert got is not None
    assert got["cold_rounds"] == {"pinned": 2, "host": 2}
    # medians of six pooled samples each: (12 + 30) / 2 = 21 against (10.5 + 33) / 2 = 21.75
    assert got["cold_compile_median_s"]["pinned"]["vadd"] == pytest.approx(21.0)
    assert got["cold_compile_ratio"]["vadd"] == pytest.approx(round(21.0 / 21.75, 3))
    # LLVM part per round 9 and 3 (zig), 12 and 4 (host): medians 6 and 8
    assert got["llvm_stages_ratio"]["vadd"] == pytest.approx(0.75)
    assert got["llvm_build_ratio"] == pytest.approx(0.9)


def test_a_single_run_without_rounds_still_reads(tmp_path: Path) -> None:
    for name, samples in (("zig", [2.0, 2.0, 2.0]), ("host", [1.0, 1.0, 1.0])):
        write_round(tmp_path, name, 1, samples, stages(1.0, 1.0, 1.0))
        (tmp_path / f"cold-{name}" / "round-1" / "bench-compile.json").rename(tmp_path / f"cold-{name}" / "bench-compile.json")
    got = report.compare_host(tmp_path, {"wall_time_s": 1.0}, {"wall_time_s": 1.0}, "zig")
    assert got is not None and got["cold_compile_ratio"] == {"vadd": 2.0}


def test_no_host_build_no_comparison(tmp_path: Path) -> None:
    assert report.compare_host(tmp_path, {"wall_time_s": 1.0}, None, "zig") is None


def test_cold_ab_compares_with_the_baseline_and_with_triton(tmp_path: Path) -> None:
    def run(name: str, r: int, tilec: list[float], triton: list[float]) -> None:
        def entry(samples: list[float]) -> dict[str, Any]:
            return {"cold_s": {"median": sorted(samples)[len(samples) // 2], "samples": samples}}

        path = tmp_path / f"cold-{name}" / f"round-{r}" / "bench-compile.json"
        path.parent.mkdir(parents=True)
        cold = {"target": "sm_90", "vadd": entry(tilec), "vadd_v8": entry([2 * x for x in tilec])}
        path.write_text(json.dumps({"cold_tilec": cold, "cold_triton": {"vadd": entry(triton)}}))

    assert report.cold_ab(tmp_path) is None
    run("this", 1, [20.0, 21.0], [60.0, 62.0])
    run("baseline", 1, [25.0, 26.0], [61.0, 63.0])
    run("baseline", 2, [27.0, 28.0], [64.0, 66.0])
    run("this", 2, [22.0, 23.0], [65.0, 67.0])
    got = report.cold_ab(tmp_path)
    assert got is not None
    assert got["rounds"] == {"this": 2, "baseline": 2}
    # pooled medians: this 21.5, baseline 26.5; Triton's eight samples 63.5 (vadd_v8 is measured against vadd)
    assert got["cold_compile_median_s"]["this"]["vadd"] == pytest.approx(21.5)
    assert got["cold_compile_ratio"] == {"vadd": round(21.5 / 26.5, 3), "vadd_v8": round(43.0 / 53.0, 3)}
    assert got["cold_compile_median_s"]["triton"] == {"vadd": pytest.approx(63.5)}
    assert got["against_triton"]["this"] == {"vadd": round(21.5 / 63.5, 3), "vadd_v8": round(43.0 / 63.5, 3)}
    assert got["against_triton"]["baseline"]["vadd"] == round(26.5 / 63.5, 3)


def test_cold_ab_without_a_baseline_is_refused_before_any_work(tmp_path: Path) -> None:
    import subprocess

    runner = Path(__file__).resolve().parents[1] / "gpu" / "runner.sh"
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(runner), "--cold-ab", "--out", str(out), "--work", str(tmp_path / "work")],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert proc.returncode == 2
    assert "--baseline-src" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()  # nothing made, nothing removed
