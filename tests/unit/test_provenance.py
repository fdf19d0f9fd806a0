"""SLSA v1 provenance in in-toto Statements, attestations as OCI referrers in a layout, and `inspect`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermetic.__main__ import main
from hermetic.attest import attach as attest
from hermetic.attest import inspection, provenance, sbom
from hermetic.core import times
from hermetic.core.digests import file_sha256
from hermetic.model import record
from hermetic.oci import referrers
from hermetic.oci.layout import Layout, pick_root
from schemas.examples import DEBIAN_ORIG, EPOCH, fake_image, fake_llvm_build, fake_wheel, settings

pytestmark = pytest.mark.unit


@pytest.fixture
def attested(tmp_path: Path) -> tuple[Path, Path]:
    rec = fake_llvm_build(tmp_path / "a")
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    return rec, layout


def _statement(layout: Path) -> dict[str, Any]:
    got = referrers.referrers(Layout(layout), artifact_type=provenance.MEDIA_TYPE)
    assert len(got) == 1
    return dict(json.loads(got[0].read()))


def test_image_provenance_is_an_in_toto_statement_with_slsa_v1(attested: tuple[Path, Path]) -> None:
    rec_path, layout = attested
    st = _statement(layout)
    facts, _ = attest.image_facts(Layout(layout))
    assert provenance.check_statement(st) == []
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "https://slsa.dev/provenance/v1"
    assert st["subject"] == [{"name": facts.name, "digest": {"sha256": facts.manifest_digest.removeprefix("sha256:")}}]
    bd = st["predicate"]["buildDefinition"]
    assert bd["buildType"] == provenance.BUILD_TYPE_LLVM_IMAGE
    ext = bd["externalParameters"]
    assert ext["recipe"] == {"name": "llvm", "version": "19.1.7", "digest": {provenance.RECIPE_DIGEST: "ab" * 32}}
    assert ext["variant"] == "support" and ext["options"]["targets"] == "X86"
    deps = {d["name"]: d for d in bd["resolvedDependencies"]}
    assert deps["llvm-toolchain-19_19.1.7.orig.tar.xz"]["digest"] == {"sha256": DEBIAN_ORIG}
    assert deps["llvm-toolchain-19_19.1.7.orig.tar.xz"]["uri"].startswith("pkg:deb/debian/llvm-toolchain-19@")
    assert deps["llvm-project-19.1.7.src-support.tar.xz"]["digest"] == {"sha256": "79" * 32}
    assert deps["cmake"]["uri"] == "pkg:generic/cmake@4.4.4"
    internal = bd["internalParameters"]
    assert internal["offline"] == {"enforced": True, "method": "netns",
                                   "reason": "each step ran in a fresh network namespace"}
    assert internal["sourceDateEpoch"] == EPOCH
    run = st["predicate"]["runDetails"]
    assert run["builder"]["id"] == provenance.DEFAULT_BUILDER_ID
    started, finished = (times.parse_iso(run["metadata"][k]) for k in ("startedOn", "finishedOn"))
    # from the record: its wall time before it was written, then the image; both times
    # are written in whole seconds, so truncation can take up to a second off the span
    assert 181.5 - 1 < finished - started < 181.5 + 60
    record_bp = next(b for b in run["byproducts"] if b["name"] == "record.json")
    assert record_bp["digest"]["sha256"] == file_sha256(rec_path)


def test_check_statement_catches_what_is_missing() -> None:
    assert provenance.check_statement([]) == ["not a JSON object"]
    problems = provenance.check_statement(
        {"_type": "x", "subject": [{"name": "a"}], "predicateType": "y",
         "predicate": {"buildDefinition": {"resolvedDependencies": [{"name": "n"}]},
                       "runDetails": {"metadata": {"startedOn": "yesterday"}}}}
    )
    text = "\n".join(problems)
    for needle in ("_type", "predicateType", "subject without digest", "buildType", "externalParameters",
                   "without uri, digest or content", "builder.id", "startedOn", "finishedOn"):
        assert needle in text, (needle, problems)


def test_attestations_live_beside_the_image_and_leave_its_digest_alone(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a")
    layout_path = fake_image(rec, tmp_path / "image")
    layout = Layout(layout_path)
    index_before = (layout_path / "index.json").read_bytes()
    root_before = pick_root(layout)
    attest.attest_image(settings(tmp_path), layout_path, rec)
    attest.attest_image(settings(tmp_path), layout_path, rec)  # again: replaces, does not pile up
    assert (layout_path / "index.json").read_bytes() == index_before
    assert pick_root(layout) == root_before
    layout.verify()
    refs = referrers.referrers(layout)
    assert sorted(r.kind for r in refs) == ["build-record", "provenance", "sbom"]
    for r in refs:
        assert r.subject == root_before.digest
        assert r.manifest["subject"] == {"mediaType": root_before.media_type, "digest": root_before.digest,
                                         "size": root_before.size}
        assert r.manifest["config"]["mediaType"] == referrers.MT_EMPTY
        assert r.manifest["artifactType"] == r.artifact_type
    by_kind = {r.kind: r for r in refs}
    assert by_kind["sbom"].artifact_type == "application/vnd.cyclonedx+json"
    assert by_kind["provenance"].artifact_type == "application/vnd.in-toto+json"
    assert by_kind["provenance"].manifest["layers"][0]["annotations"][referrers.ANN_PREDICATE] == provenance.PREDICATE_TYPE
    # the record goes byte for byte, so its sha256 is the one the provenance names
    assert by_kind["build-record"].read() == rec.read_bytes()
    named = [b["digest"]["sha256"] for b in json.loads(by_kind["provenance"].read())["predicate"]["runDetails"]["byproducts"]
             if b["annotations"]["role"] == "build-record"]
    assert named == [file_sha256(rec)]


def test_attest_refuses_a_record_of_another_tree(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a")
    other = fake_llvm_build(tmp_path / "b", seed="x")
    layout = fake_image(rec, tmp_path / "image")
    with pytest.raises(Exception, match="not the record of"):
        attest.attest_image(settings(tmp_path), layout, other)


def test_inspect_layout_reports_matching_attestations(attested: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, layout = attested
    report = inspection.inspect_layout(layout)
    assert report["artifact"]["kind"] == "oci-image"
    assert report["built_from"]["variant"] == "support"
    assert report["built_from"]["provenance"]["offline"]["enforced"] is True
    assert {k: v["status"] for k, v in report["attestations"].items()} == {
        "sbom": "matches", "provenance": "matches", "build-record": "matches"}
    assert main(["inspect", str(layout), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["artifact"]["digest"] == report["artifact"]["digest"]
    assert main(["inspect", str(layout)]) == 0
    text = capsys.readouterr().out
    assert "sbom        matches" in text and "provenance  matches" in text and "build-record matches" in text


def test_inspect_catches_attestations_of_another_image(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = fake_llvm_build(tmp_path / "a")
    layout_path = fake_image(rec, tmp_path / "image")
    layout = Layout(layout_path)
    subject = pick_root(layout)
    # an SBOM that claims another image, attached to this one
    bom = sbom.image_sbom(record.load_build_record(rec), attest.image_facts(layout)[0], {})
    bom["metadata"]["component"]["hashes"] = [{"alg": "SHA-256", "content": "00" * 32}]
    referrers.attach(layout, subject, sbom.MEDIA_TYPE, sbom.dumps(bom), "sbom.cdx.json",
                     {referrers.ANN_KIND: "sbom"})
    report = inspection.inspect_layout(layout_path)
    assert report["attestations"]["sbom"]["status"] == "MISMATCH"
    assert report["attestations"]["provenance"]["status"] == "missing"
    # a build record of another tree, attached to this image
    data = json.loads(rec.read_text())
    data["tree"]["digest"] = "sha256:" + "00" * 32
    referrers.attach(layout, subject, record.RECORD_MEDIA_TYPE, json.dumps(data).encode(), "record.json",
                     {referrers.ANN_KIND: attest.KIND_BUILD_RECORD})
    got = inspection.inspect_layout(layout_path)["attestations"]["build-record"]
    assert got["status"] == "MISMATCH" and got["problems"][0].startswith(f"it records tree sha256:{'00' * 32}")
    assert main(["inspect", str(layout_path)]) == 8
    assert "do not match" in capsys.readouterr().err


def test_wheel_provenance_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = fake_wheel(tmp_path / "dist")
    assert main(["attest", str(wheel), "--root", str(Path(__file__).resolve().parents[2]),
                 "--work-dir", str(tmp_path / "w")]) == 0
    st = json.loads((wheel.parent / (wheel.name + ".intoto.json")).read_text())
    assert provenance.check_statement(st) == []
    assert st["subject"][0]["digest"]["sha256"] == file_sha256(wheel)
    assert st["predicate"]["buildDefinition"]["buildType"] == provenance.BUILD_TYPE_WHEEL
    names = {d["name"] for d in st["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert {"llvm", "scikit-build-core", "nanobind", "cmake", "ninja", "cxx", "python"} <= names
    capsys.readouterr()
    report = inspection.inspect_wheel(wheel)
    assert {k: v["status"] for k, v in report["attestations"].items()} == {"sbom": "matches", "provenance": "matches"}
    # a rebuilt (different) wheel no longer matches its attestations
    with open(wheel, "ab") as f:
        f.write(b"\0")
    report = inspection.inspect_wheel(wheel)
    assert report["attestations"]["sbom"]["status"] == "MISMATCH"
    assert report["artifact"]["record_matches"] is False
