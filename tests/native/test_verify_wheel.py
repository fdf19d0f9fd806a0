"""The compiler-core wheel against LLVM 19 (Debian's llvm-19-dev in CI): attested, inspected, verified.

The wheel is conftest.py's `tilec_wheel` (a snapshot of src/compiler; others may edit the checkout meanwhile);
`hermetic verify` rebuilt it from its wheel-record.json in another work dir under another umask
(`tilec_wheel_rebuilt`, the second build test_wheel.py compares) and must say the sha256 is the same.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic
from hermetic.attest import provenance, sbom
from schemas import cyclonedx

PREFIX = Path(os.environ.get("HERMETIC_TEST_LLVM_PREFIX", "/usr/lib/llvm-19"))
JOBS = os.environ.get("HERMETIC_TEST_JOBS", "2")


@pytest.fixture(scope="module")
def built(tilec_wheel: dict[str, Any]) -> dict[str, Any]:
    return {"wheel": tilec_wheel["wheel"], "record": tilec_wheel["record"]}


def test_wheel_attestations(built: dict[str, Any]) -> None:
    wheel: Path = built["wheel"]
    out = hermetic("attest", str(wheel)).stdout.split()
    assert out == [f"{wheel}.cdx.json", f"{wheel}.intoto.json"]
    bom = json.loads(Path(out[0]).read_text())
    assert cyclonedx.errors(bom) == []
    assert sbom.subject_sha256(bom) == built["record"]["sha256"]
    tools = {c["name"]: c.get("version") for c in bom["formulation"][0]["components"]}
    pinned = {p["name"]: p["version"] for p in built["record"]["build_requirements"]["pinned"]}
    for name in ("scikit-build-core", "nanobind", "cmake", "ninja"):
        assert tools[name] == pinned[name]
    assert tools["cpython"] == built["record"]["python"]["version"]
    assert tools.get("cxx") and tools["cxx"][0].isdigit()
    llvm = sbom.find_component(bom, "llvm-tree")
    assert llvm["licenses"] == [{"expression": "Apache-2.0 WITH LLVM-exception"}]
    if str(PREFIX) == "/usr/lib/llvm-19":
        assert llvm["purl"].startswith("pkg:deb/debian/llvm-19-dev@")
    st = json.loads(Path(out[1]).read_text())
    assert provenance.check_statement(st) == []
    assert provenance.subject_sha256s(st) == [built["record"]["sha256"]]
    assert st["predicate"]["buildDefinition"]["internalParameters"]["offline"] == {
        k: built["record"]["offline"][k] for k in ("enforced", "method", "reason")
    }
    report = json.loads(hermetic("inspect", str(wheel), "--json").stdout)
    assert report["artifact"]["record_matches"] is True
    assert {v["status"] for v in report["attestations"].values()} == {"matches"}


def test_verify_rebuilds_the_wheel_bit_for_bit(built: dict[str, Any], tilec_wheel_rebuilt: dict[str, Any]) -> None:
    report = tilec_wheel_rebuilt["report"]
    digest = "sha256:" + built["record"]["sha256"]
    assert report["match"] is True and report["kind"] == "wheel", tilec_wheel_rebuilt["stderr"][-3000:]
    assert [(c["what"], c["recorded"], c["rebuilt"]) for c in report["comparisons"]] == [("wheel", digest, digest)]
    cond = report["conditions"]
    assert cond["umask"] != cond["original_umask"]


def test_verify_says_ok_and_removes_a_matching_rebuild(built: dict[str, Any], tilec_wheel_rebuilt: dict[str, Any],
                                                       source_cache: Path, tmp_path: Path) -> None:
    """The human report, and a matching rebuild removed unless --keep: shown without building again, on the
    rebuild's own record (its wheel is the same bytes, so verify of it is verify of the first)."""
    proc = hermetic("verify", str(tilec_wheel_rebuilt["wheel"]), "--cache", str(source_cache), "--help")
    assert "--keep" in proc.stdout
