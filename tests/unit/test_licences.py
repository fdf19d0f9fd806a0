"""Licences: SPDX expressions checked against the pinned SPDX License List; every SBOM component carries one."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from hermetic.attest import attach as attest
from hermetic.attest import licences, sbom
from hermetic.model import record
from schemas.examples import ZIG_ID, fake_image, fake_llvm_build, fake_wheel, settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("Apache-2.0 WITH LLVM-exception", None),
        ("MIT OR (Apache-2.0 AND BSD-3-Clause)", None),
        ("LicenseRef-vendor-eula", None),
        ("Apache 2.0", "'Apache' is not on the SPDX License List"),
        ("GPL-2.0", "deprecated"),
        ("MIT WITH Classpath-exception-9", "not an SPDX licence exception"),
        ("MIT AND", "expected a licence identifier"),
        ("(MIT", "unbalanced parenthesis"),
        ("MIT BSD-3-Clause", "unexpected 'BSD-3-Clause'"),
        ("", "empty"),
    ],
)
def test_expressions_are_checked_against_the_pinned_list(expression: str, problem: str | None) -> None:
    found = licences.problems(expression)
    assert (found == []) if problem is None else any(problem in p for p in found), found


def test_the_pinned_list_is_the_spdx_list_and_says_where_it_comes_from() -> None:
    data = licences.spdx_list()
    assert data["licenseListVersion"] == "3.29" and "spdx/license-list-data" in data["source"]
    assert len(data["licenses"]) > 600 and "LLVM-exception" in data["exceptions"]
    # the CycloneDX schema bundles an SPDX list of its own (3.28): every current id of ours is known to it,
    # except those added in 3.29
    cdx = set(json.loads((Path(__file__).parents[1] / "schemas" / "cyclonedx-1.6" / "spdx.SNAPSHOT.schema.json")
                         .read_text())["enum"])
    assert len(set(data["licenses"]) - cdx) < 20


def test_every_pinned_expression_is_valid() -> None:
    t = licences.table()
    entries = [*t["packages"].values(), *t["compilers"].values(), *(p for ps in t["runtime"].values() for p in ps)]
    assert entries and all(licences.is_valid(e["expression"]) and e["from"] for e in entries)


def test_metadata_first_then_pinned() -> None:
    assert licences.from_metadata("Name: x\nLicense-Expression: Apache-2.0 OR BSD-2-Clause\n") == licences.Found(
        "Apache-2.0 OR BSD-2-Clause", "its metadata's License-Expression")
    # cmake's wheel says "Apache 2.0" (not SPDX) and two licence classifiers: the pinned table decides
    cmake = "Name: cmake\nLicense: Apache 2.0\nClassifier: License :: OSI Approved :: Apache Software License\n" \
            "Classifier: License :: OSI Approved :: BSD License\n"
    assert licences.from_metadata(cmake) is None
    assert licences.of_package("cmake", {"cmake": cmake}).expression == "BSD-3-Clause"
    mpl = "Name: pathspec\nClassifier: License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)\n"
    assert licences.of_package("pathspec", {"pathspec": mpl}).source == "its metadata's licence classifier"
    assert licences.of_package("no-such-project").expression == licences.UNKNOWN


def _all_components(bom: dict[str, Any]) -> list[dict[str, Any]]:
    return [bom["metadata"]["component"], *bom["components"], *(c for f in bom["formulation"] for c in f["components"])]


def _check_all_licensed(bom: dict[str, Any]) -> dict[str, str]:
    got = {}
    for c in _all_components(bom):
        exprs = [lic["expression"] for lic in c.get("licenses") or []]
        assert len(exprs) == 1, f"{c['bom-ref']} has no licence"
        assert licences.problems(exprs[0]) == [], (c["bom-ref"], exprs[0])
        got[c["bom-ref"]] = exprs[0]
    return got


def test_every_component_of_an_image_sbom_is_licensed(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a", toolchain_id=ZIG_ID)
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    from hermetic.oci import referrers
    from hermetic.oci.layout import Layout

    bom = json.loads(next(r for r in referrers.referrers(Layout(layout)) if r.kind == attest.KIND_SBOM).read())
    got = _check_all_licensed(bom)
    assert got["llvm-tree"] == "Apache-2.0 WITH LLVM-exception"
    assert got["llvm-tool:cmake"] == "BSD-3-Clause" and got["llvm-tool:ninja"] == "Apache-2.0"
    assert got["llvm-tool:conan"] == "MIT" and got["llvm-tool:python"] == "PSF-2.0"
    assert got["llvm-toolchain:ziglang-0.17.1"] == "MIT" and got["llvm-tool:cc"] == "MIT"  # zig's clang


def test_every_component_of_a_wheel_sbom_is_licensed_from_the_wheelhouse(tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "a", toolchain_id=ZIG_ID)
    rec = record.load_build_record(rec_path)
    ref = {"path": str(rec_path), "variant": "support", "inputs_digest": rec.inputs_digest, "tree_digest": rec.tree.digest}
    wheel = fake_wheel(tmp_path / "dist", llvm_prefix=rec.install_root + rec.prefix, llvm_record=ref, toolchain_id=ZIG_ID)
    art = attest.find_wheel(wheel)
    # a wheelhouse entry whose METADATA states its licence, pinned by the record's sha256
    house = tmp_path / "dist" / "wheelhouse"
    house.mkdir()
    whl = house / "pip-26.3-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("pip-26.3.dist-info/METADATA", "Name: pip\nVersion: 26.3\nLicense-Expression: MIT\n")
    data = json.loads(art.record_path.read_text())
    from hermetic.core.digests import file_sha256

    for p in data["build_requirements"]["pinned"]:
        if p["name"] == "pip":
            p["sha256"] = [file_sha256(whl)]
    art.record_path.write_text(json.dumps(data))
    art = attest.find_wheel(wheel)
    meta = attest.build_metadata(settings(tmp_path), art.record)
    assert set(meta) == {"pip"}
    bom = sbom.wheel_sbom(art.record, license_expression=attest.wheel_license(wheel), llvm_record=rec,
                                llvm_origin=None, canonical={}, metadata=meta)
    got = _check_all_licensed(bom)
    pip = next(c for c in bom["formulation"][0]["components"] if c["bom-ref"] == "wheel-tool:pip")
    assert {"name": "hermetic:license.source", "value": "its metadata's License-Expression"} in pip["properties"]
    # zig's runtime parts, linked into the extension module
    runtime = {v for k, v in got.items() if k.startswith("wheel-runtime:")}
    assert runtime == {"MIT", "Apache-2.0 WITH LLVM-exception", "LGPL-2.1-or-later WITH GCC-exception-2.0"}
    assert got["wheel"] == "Apache-2.0" and got["nanobind"] == "BSD-3-Clause"


def test_inspect_shows_a_licence_summary_and_says_unsigned(tmp_path: Path) -> None:
    from hermetic.attest import inspection

    rec = fake_llvm_build(tmp_path / "a", toolchain_id=ZIG_ID)
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    report = inspection.inspect_layout(layout)
    assert report["licences"]["artifact"]["Apache-2.0 WITH LLVM-exception"][0] == "llvm 19.1.7"
    assert "cmake 4.4.4" in report["licences"]["build"]["BSD-3-Clause"]
    assert report["signatures"]["status"] == "unsigned"
    # the provenance, the record of how the attestation was made, says so too
    assert report["built_from"]["provenance"]["signing"]["signed"] is False
    text = inspection.render(report)
    assert "signatures: UNSIGNED" in text and "licences (from the SBOM):" in text
    assert "signing            signed=False, why=no signing key was given" in text
    assert "built with  BSD-3-Clause: cmake 4.4.4" in text
