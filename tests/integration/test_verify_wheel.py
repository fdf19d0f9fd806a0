"""The compiler-core wheel against LLVM 19 (Debian's llvm-19-dev in CI): attested, inspected, verified.

The wheel is the first of the two builds test_wheel.py compares (a snapshot of src/compiler;
others may edit the checkout meanwhile); `hermetic verify` rebuilds it from its wheel-record.json
in another work dir under another umask and must get the same sha256.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic
from hermetic import provenance, sbom
from schemas import cyclonedx

pytestmark = pytest.mark.integration

PREFIX = Path(os.environ.get("HERMETIC_TEST_LLVM_PREFIX", "/usr/lib/llvm-19"))
JOBS = os.environ.get("HERMETIC_TEST_JOBS", "2")


@pytest.fixture(scope="module")
def built(two_builds: list[dict[str, Any]]) -> dict[str, Any]:
    """The first of test_wheel.py's two builds (conftest.py): one tilec build fewer in CI."""
    return {"wheel": two_builds[0]["wheel"], "record": two_builds[0]["record"]}


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


def test_verify_rebuilds_the_wheel_bit_for_bit(built: dict[str, Any], source_cache: Path, tmp_path: Path) -> None:
    rebuild = tmp_path / "another" / "place"
    proc = hermetic(
        "verify", str(built["wheel"]), "--cache", str(source_cache), "--rebuild-dir", str(rebuild),
        "--jobs", JOBS, "--offline", "auto",
    )
    out = proc.stdout
    print("\n" + out)
    digest = "sha256:" + built["record"]["sha256"]
    assert f"recorded {digest}" in out
    assert f"rebuilt  {digest}  match" in out
    assert "verify: OK, the rebuild is bit-for-bit identical" in out
    assert not rebuild.exists(), "a matching rebuild is removed unless --keep"
