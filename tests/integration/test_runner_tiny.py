"""The GPU runner end to end on the tiny recipe, here without a GPU: its builds through the real hermetic, offline
from a carried pruned archive, its records copied and summarized, the golden comparison, the packed tree, the gpu
tier skipped and said so; run again, hermetic keeps both builds and their steps say `done`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, TINY, hermetic


@pytest.fixture(scope="module")
def carried(tmp_path_factory: pytest.TempPathFactory, tiny: tuple[str, ...], tiny_install: Path,
            source_cache: Path) -> dict[str, Path]:
    """What would be carried to a runner: tiny's pruned archive with its pruned.json, the wheelhouse (filled by
    tiny_install's build), and no wheels (this machine's Python has conan)."""
    base = tmp_path_factory.mktemp("carry")
    hermetic("source", "prune", *tiny, "--variant", "support", "--output", str(base / "carry"),
             "--cache", str(source_cache))
    (base / "whl").mkdir()
    archive = next((base / "carry").glob("*.tar.xz"))
    return {"source": archive, "wheels": base / "whl", "wheelhouse": source_cache / "wheelhouse"}


def runner(carried: dict[str, Path], base: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.runner", "--llvm-recipe", str(TINY), "--variant", "full", "--toolchain", "host",
         "--source", str(carried["source"]), "--wheels", str(carried["wheels"]),
         "--wheelhouse", str(carried["wheelhouse"]), "--no-wheel", "--commit", "test",
         "--out", str(base / "out"), "--work", str(base / "work"), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    report = json.loads((base / "out" / "report.json").read_text())
    return proc, report


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["status"] for s in report["steps"]}


def test_the_runner_builds_compares_packs_and_reports(carried: dict[str, Path], tmp_path: Path) -> None:
    proc, report = runner(carried, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    assert (out / "done").read_text() == "0\n"
    got = statuses(report)
    assert got["install-wheels"] == "ok" and got["build-support"] == "ok" and got["build-llvm"] == "ok"
    assert got["golden"] == "ok" and got["pack"] == "ok"
    assert got["wheel"] == "skipped" and got["gpu-tests"] == "skipped"
    assert report["gpu_tier"]["status"] == "skipped" and report["gpu_tier"]["reason"]  # no device, or no wheel
    assert report["result"] == "passed" and report["failures"] == [] and report["commit"] == "test"

    # the records beside the report are hermetic's own, and the report says what they say
    for name, key, variant in (("record.json", "llvm", "full"), ("support-record.json", "llvm_support", "support")):
        rec = json.loads((out / name).read_text())
        assert rec["variant"] == variant and report[key]["tree_digest"] == rec["tree"]["digest"]
        assert report["variants"][variant]["inputs_digest"] == rec["inputs_digest"]
        assert report["variants"][variant]["toolchain_id"] == {"name": "host", "kind": "host"}
        # tiny has no golden digest: compared, and said so
        assert report["golden"][variant]["status"] == "no entry"
        assert report["golden"][variant]["entry"] == f"tiny-{variant}-host-{report['llvm']['arch']}"
    assert report["offline"]["requested"] in ("require", "auto") and report["source"]["matches_pruned_json"] is True

    # the packed tree: its parts put together are the archive the report names
    pack = report["install_tree_archive"]
    whole = b"".join((out / p["file"]).read_bytes() for p in pack["parts"])
    assert hashlib.sha256(whole).hexdigest() == pack["sha256"] and len(whole) == pack["size"]

    # again in the same work dir: hermetic keeps both builds, and the steps say so
    proc, again = runner(carried, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert statuses(again)["build-support"] == "done" and statuses(again)["build-llvm"] == "done"
    for variant, first in report["variants"].items():
        second = again["variants"][variant]
        assert {k: second[k] for k in first if k != "step_wall_s"} == {k: v for k, v in first.items() if k != "step_wall_s"}


def test_a_failed_build_fails_its_step_skips_what_needs_it_and_still_reports(carried: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    proc, report = runner(carried, tmp_path, "--variant", "no-such-variant", "--no-support")
    assert proc.returncode == 1 and (tmp_path / "out" / "done").read_text() == "1\n"
    got = statuses(report)
    assert got["build-llvm"] == "failed" and got["pack"] == "skipped" and got["ptxas"] == "skipped"
    step = next(s for s in report["steps"] if s["name"] == "pack")
    assert step["reason"] == "build-llvm failed"
    failure = report["failures"][0]
    assert failure["step"] == "build-llvm" and failure["rc"] != 0
    assert any("no-such-variant" in line for line in failure["output_tail"])  # hermetic's own what/why/fix
    assert report["result"] == "failed"
