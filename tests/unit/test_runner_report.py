"""The GPU runner's report.json: one shape whatever ran, the variants' digests from hermetic's own record types, the
trees against tests/golden/digests.json, the gpu tier's results, and the cold-compile rounds pooled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.runner import cold, facts, golden, main, records
from devtools.runner.core import Context, Report, State, Step, StepFailed, execute
from devtools.runner.options import resolve
from devtools.runner.records import BuildRecord


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
    got = cold.compare_host(tmp_path, {"wall_time_s": 90.0}, {"wall_time_s": 100.0, "tree_digest": "d"}, "zig")
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
    got = cold.compare_host(tmp_path, {"wall_time_s": 1.0}, {"wall_time_s": 1.0}, "zig")
    assert got is not None and got["cold_compile_ratio"] == {"vadd": 2.0}


def test_no_host_build_no_comparison(tmp_path: Path) -> None:
    assert cold.compare_host(tmp_path, {"wall_time_s": 1.0}, None, "zig") is None


def test_cold_ab_compares_with_the_baseline_and_with_triton(tmp_path: Path) -> None:
    def run(name: str, r: int, tilec: list[float], triton: list[float]) -> None:
        def entry(samples: list[float]) -> dict[str, Any]:
            return {"cold_s": {"median": sorted(samples)[len(samples) // 2], "samples": samples}}

        path = tmp_path / f"cold-{name}" / f"round-{r}" / "bench-compile.json"
        path.parent.mkdir(parents=True)
        cold = {"target": "sm_90", "vadd": entry(tilec), "vadd_v8": entry([2 * x for x in tilec])}
        path.write_text(json.dumps({"cold_tilec": cold, "cold_triton": {"vadd": entry(triton)}}))

    assert cold.cold_ab(tmp_path) is None
    run("this", 1, [20.0, 21.0], [60.0, 62.0])
    run("baseline", 1, [25.0, 26.0], [61.0, 63.0])
    run("baseline", 2, [27.0, 28.0], [64.0, 66.0])
    run("this", 2, [22.0, 23.0], [65.0, 67.0])
    got = cold.cold_ab(tmp_path)
    assert got is not None
    assert got["rounds"] == {"this": 2, "baseline": 2}
    # pooled medians: this 21.5, baseline 26.5; Triton's eight samples 63.5 (vadd_v8 is measured against vadd)
    assert got["cold_compile_median_s"]["this"]["vadd"] == pytest.approx(21.5)
    assert got["cold_compile_ratio"] == {"vadd": round(21.5 / 26.5, 3), "vadd_v8": round(43.0 / 53.0, 3)}
    assert got["cold_compile_median_s"]["triton"] == {"vadd": pytest.approx(63.5)}
    assert got["against_triton"]["this"] == {"vadd": round(21.5 / 63.5, 3), "vadd_v8": round(43.0 / 63.5, 3)}
    assert got["against_triton"]["baseline"]["vadd"] == round(26.5 / 63.5, 3)


# --- the report's shape -------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "unit" / "data" / "llvm-nvptx-record.json"
GOLDEN = ROOT / "tests" / "golden" / "digests.json"


def record(**change: Any) -> BuildRecord:
    data = json.loads(RECORD.read_text()) | change
    return BuildRecord.from_json(data, str(RECORD))


def zig_record(tree: str, **change: Any) -> BuildRecord:
    """The test record as if built with the pinned zig, as tests/golden/digests.json knows the nvptx tree."""
    want = json.loads(GOLDEN.read_text())["digests"]["llvm-nvptx-zig-amd64"]
    rec = json.loads(RECORD.read_text())
    rec["tree"]["digest"] = tree
    return BuildRecord.from_json(rec | {"toolchain_id": want["toolchain_id"], "arch": "amd64"} | change, str(RECORD))


def test_variants_say_digests_toolchain_and_times_as_the_docs_do() -> None:
    rec = record()
    got = records.variant_entry(rec, 565.1)
    assert got == {"nvptx": {"tree_digest": rec.tree.digest, "inputs_digest": rec.inputs_digest,
                             "toolchain_id": {"name": "host", "kind": "host"}, "wall_time_s": 441.5,
                             "step_wall_s": 565.1}}
    summary = records.llvm_summary(rec)
    assert summary["tree_entries"] == len(rec.tree.files) and summary["test_package"]["ptx"][0]["file"] == "kernel.sm_80.ptx"
    json.dumps(summary)  # all of it goes into report.json


def test_trees_against_the_golden_digests() -> None:
    table = golden.load(GOLDEN)
    nvptx = table["llvm-nvptx-zig-amd64"]
    got = golden.compare(zig_record(nvptx["tree"]), table, version_given=False, arch="amd64")
    assert got["status"] == golden.MATCH and got["entry"] == "llvm-nvptx-zig-amd64"
    assert got["ptx"] == {"kernel.sm_80.ptx": {"expected": nvptx["test_package_ptx"]["kernel.sm_80.ptx"],
                                               "got": nvptx["test_package_ptx"]["kernel.sm_80.ptx"], "match": True}}
    other = golden.compare(zig_record("sha256:" + "0" * 64), table, version_given=False, arch="amd64")
    assert other["status"] == golden.DIFFERS and other["expected"] == nvptx["tree"]
    bad_ptx = zig_record(nvptx["tree"], test_package={"ran": True, "ptx": [{"file": "kernel.sm_80.ptx", "sha256": "0"}]})
    assert golden.compare(bad_ptx, table, False, "amd64")["status"] == golden.DIFFERS
    # a host build, and a release asked for by name, have no golden entry here
    assert golden.compare(record(), table, False, "amd64") | {"tree": None} == {
        "entry": "llvm-nvptx-host-amd64", "tree": None, "status": golden.NO_ENTRY}
    assert golden.compare(zig_record(nvptx["tree"]), table, True, "amd64")["entry"] == "llvm-nvptx-19.1.7-zig-amd64"
    # another pin of zig: not comparable, and not a failure
    moved = zig_record(nvptx["tree"], toolchain_id=nvptx["toolchain_id"] | {"version": "0.18.0"})
    assert golden.compare(moved, table, False, "amd64")["status"] == golden.OTHER_TOOLCHAIN


def test_the_gpu_tiers_junit_summary(tmp_path: Path) -> None:
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.gpu.test_a" name="test_ok"/>'
        '<testcase classname="tests.gpu.test_a" name="test_bad"><failure message="no"/></testcase>'
        '<testcase classname="tests.gpu.test_b" name="test_skip"><skipped message="no device"/></testcase>'
        '<testcase classname="tests.gpu.test_b" name="test_err"><error message="boom"/></testcase>'
        '</testsuite></testsuites>')
    got = facts.junit(xml)
    assert got is not None
    assert (got["total"], got["passed"], got["failed"], got["errors"], got["skipped"]) == (4, 1, 1, 1, 1)
    assert got["failing"] == ["tests.gpu.test_a::test_bad", "tests.gpu.test_b::test_err"]
    assert got["skipped_tests"] == [{"test": "tests.gpu.test_b::test_skip", "reason": "no device"}]
    assert facts.junit(tmp_path / "none.xml") is None


class Says(Step):
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail = name, fail

    def run(self, ctx: Context) -> State:
        ctx.note("line one\nline two")
        if self.fail:
            raise StepFailed("it broke", 4)
        return State.OK


def test_the_finished_report_has_one_shape_and_says_what_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the machine's tools are not asked here (no external tools in the unit tier)
    monkeypatch.setattr(facts, "tool_versions", lambda *a: {"cmake": "cmake version 4.4.4"})
    monkeypatch.setattr(facts, "probe", lambda *a: {"python": "3.12.3"})
    monkeypatch.setattr(facts, "machine", lambda: {"cpus": 16, "gpus": []})
    opts = resolve(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--source", str(tmp_path / "src.tar.xz"),
                    "--commit", "abc1234"], {}, tmp_path)
    opts.out.mkdir(parents=True)
    report = Report(opts.out / "report.json", main.start_facts(opts, "require", None))
    ctx = Context(opts, ROOT, report, "require", {})
    outcomes = execute([Says("gpu-tests"), Says("wheel", fail=True)], ctx, opts.work / "logs",
                       on_step=lambda o: main.record_steps(report, o))
    main.finish(ctx, outcomes, 1)
    got = json.loads((opts.out / "report.json").read_text())
    assert set(got) == {"schema", *main.REPORT_KEYS}
    assert got["schema"] == "hermetic.gpu-runner-report/2" and got["commit"] == "abc1234"
    assert got["result"] == "failed" and got["exit_code"] == 1
    assert got["steps"][0] == {"name": "gpu-tests", "status": "ok", "rc": 0, "wall_s": got["step_wall_s"]["gpu-tests"]}
    assert got["steps"][1]["status"] == "failed" and got["steps"][1]["reason"] == "it broke"
    assert got["failures"] == [{"step": "wheel", "rc": 4, "why": "it broke",
                                "output_tail": ["line one", "line two", "step wheel failed: it broke"]}]
    assert got["source"] == {"path": str(tmp_path / "src.tar.xz"), "file": "src.tar.xz", "missing": True}
    assert got["offline"] == {"requested": "require", "fallback": None}
    assert got["gpu_tier"] == {"status": "ok", "reason": ""}
    assert got["options"]["commit"] == "abc1234" and got["options"]["pack"] is True
    assert got["llvm"] is None and got["wheel"] is None  # what did not run is there, and null
