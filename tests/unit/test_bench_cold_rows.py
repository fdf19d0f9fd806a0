"""bench/tilec_compile.py's cold rows: with pairs measured, the cold goal's verdict is the pairs' (the median of their
ratios), and the row of each side's own median, taken seconds apart, is context; without pairs it keeps the verdict."""

from __future__ import annotations

from typing import Any

from bench.tilec_compile import ratios


def cold(tilec_ms: float, triton_ms: float) -> dict[str, Any]:
    return {
        "cold_tilec": {"vadd": {"cold_s": {"median": tilec_ms / 1e3}, "default_assembler": ["nvptxcompiler", ""]}},
        "cold_triton": {"vadd": {"cold_s": {"median": triton_ms / 1e3}}},
    }


def goal_rows(rows: list[list[Any]]) -> list[list[Any]]:
    return [r for r in rows if r[4] == "<= 0.333"]


def test_without_pairs_the_medians_row_is_judged() -> None:
    rows = ratios(cold(30.0, 60.0))
    assert [(r[0], r[5]) for r in goal_rows(rows)] == [("cold IR->cubin vadd, default (auto: nvptxcompiler) (ms)", "missed")]


def test_with_pairs_the_pairs_are_judged_and_the_medians_are_context() -> None:
    # the medians taken apart say 0.5; the pairs, each at one machine speed, say 0.3 (one pair at 0.6)
    res = cold(30.0, 60.0)
    res["cold_pairs"] = {"kernels": {"vadd": {"triton_twin": "vadd", "tilec_s": [0.018, 0.02, 0.03],
                                              "triton_s": [0.06, 0.0667, 0.05], "ratio": [0.3, 0.2999, 0.6]}}}
    rows = ratios(res)
    medians = next(r for r in rows if r[0].startswith("cold IR->cubin vadd, default"))
    assert medians[4:] == ["(paired below)", "-"]
    [judged] = goal_rows(rows)
    assert judged[0] == "cold IR->cubin vadd in pairs with Triton's vadd: the median of 3 pairs' ratios (ms)"
    assert judged[1:4] == [20.0, 60.0, 0.3] and judged[5] == "met"


def test_a_kernel_outside_the_goal_is_context() -> None:
    res = cold(10.0, 60.0)
    res["cold_tilec"]["vadd_v8_m4"] = res["cold_tilec"].pop("vadd")
    rows = ratios(res)
    assert not goal_rows(rows)
    assert [r[4:] for r in rows if r[0].startswith("cold IR->cubin vadd_v8_m4, default")] == [["(context)", "-"]]


def test_the_floor_of_tritons_own_ptx_in_process_is_a_context_row() -> None:
    res = cold(30.0, 60.0)
    res["cold_pairs"] = {"kernels": {"vadd": {"triton_twin": "vadd", "tilec_s": [0.018, 0.02, 0.03],
                                              "triton_s": [0.06, 0.0667, 0.05], "ratio": [0.3, 0.2999, 0.6],
                                              "triton_ptx_in_process_s": [0.012, 0.02, 0.015],
                                              "triton_ptx_in_process_ratio": [0.2, 0.3, 0.3]}}}
    rows = ratios(res)
    [floor] = [r for r in rows if r[0].startswith("floor: Triton's own PTX")]
    assert floor[1:] == [15.0, 60.0, 0.3, "(context)", "-"]
    # the judged row stays the pairs' own ratio
    assert [r[3] for r in goal_rows(rows)] == [0.3]
