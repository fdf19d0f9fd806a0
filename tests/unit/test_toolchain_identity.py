"""The pinned toolchain's identity in build records, SBOMs, provenance, inspect and verify (no build runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import pytest

from hermetic.attest import attach as attest
from hermetic.attest import inspection, provenance, sbom
from hermetic.build import llvm
from hermetic.core.errors import VerifyError
from hermetic.fetch import sources
from hermetic.model import recipe, record, toolchains
from hermetic.oci import referrers
from hermetic.oci.layout import Layout
from hermetic.verify import rebuild as verify
from schemas import cyclonedx
from schemas.examples import ZIG_ID, fake_image, fake_llvm_build, settings

pytestmark = pytest.mark.unit


# -- record ---------------------------------------------------------------------------------------------------


def test_a_record_without_toolchain_id_reads_as_host_and_writes_back_without_it(tmp_path: Path) -> None:
    path = fake_llvm_build(tmp_path / "a")
    data = json.loads(path.read_text())
    rec = record.BuildRecord.from_json(data)
    assert rec.toolchain_id is None and rec.toolchain_ref == record.HOST_TOOLCHAIN
    assert rec.toolchain_ref.label == "host"
    assert "toolchain_id" not in rec.as_json() and rec.as_json() == data


def test_a_record_with_toolchain_id_round_trips(tmp_path: Path) -> None:
    path = fake_llvm_build(tmp_path / "a", toolchain_id=ZIG_ID)
    data = json.loads(path.read_text())
    rec = record.BuildRecord.from_json(data)
    assert rec.toolchain_id is not None and rec.toolchain_ref is rec.toolchain_id
    assert rec.toolchain_ref.as_json() == ZIG_ID
    assert rec.toolchain_ref.glibc == "2.28"
    assert rec.as_json() == data
    assert record.BuildRecord.from_json(json.loads(json.dumps(rec.as_json()))) == rec


def test_toolchain_ref_is_toolchain_identity() -> None:
    zig = toolchains.for_root(settings(Path("/tmp")).root, "zig")
    assert record.ToolchainRef.from_mapping(zig.identity()).as_json() == zig.identity() == ZIG_ID
    host = toolchains.for_root(settings(Path("/tmp")).root, "host")
    assert record.ToolchainRef.from_mapping(host.identity()) == record.HOST_TOOLCHAIN


def test_a_malformed_toolchain_id_is_named(tmp_path: Path) -> None:
    data = json.loads(fake_llvm_build(tmp_path / "a", toolchain_id=ZIG_ID).read_text())
    data["toolchain_id"] = {"kind": "zig"}
    with pytest.raises(VerifyError) as err:
        record.BuildRecord.from_json(data, "record.json")
    assert "toolchain_id.name" in err.value.why


# -- SBOM and provenance --------------------------------------------------------------------------------------


def _attested(tmp_path: Path, toolchain_id: dict[str, str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    rec = fake_llvm_build(tmp_path / "a", toolchain_id=toolchain_id)
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    bom = json.loads(referrers.referrers(Layout(layout), artifact_type=sbom.MEDIA_TYPE)[0].read())
    st = json.loads(referrers.referrers(Layout(layout), artifact_type=provenance.MEDIA_TYPE)[0].read())
    return bom, st


def _workflow_props(bom: dict[str, Any]) -> dict[str, str]:
    flow = next(w for w in bom["formulation"][0]["workflows"] if w["bom-ref"] == "workflow:llvm-build")
    return {p["name"].removeprefix(sbom.PROP): p["value"] for p in flow["properties"]}


def test_a_zig_build_s_sbom_and_provenance_name_the_wheel_and_its_sha256(tmp_path: Path) -> None:
    bom, st = _attested(tmp_path, ZIG_ID)
    assert cyclonedx.errors(bom) == []
    tools = {c["bom-ref"]: c for c in bom["formulation"][0]["components"]}
    wheel = tools["llvm-toolchain:ziglang-0.17.1"]
    assert wheel["purl"] == "pkg:pypi/ziglang@0.17.1"
    assert wheel["hashes"] == [{"alg": "SHA-256", "content": ZIG_ID["sha256"]}]
    assert sbom.property_of(wheel, "toolchain.file") == ZIG_ID["file"]
    assert sbom.property_of(wheel, "toolchain.target") == "x86_64-linux-gnu.2.28"
    assert sbom.property_of(wheel, "toolchain.glibc") == "2.28"
    props = _workflow_props(bom)
    assert props["toolchain"] == "zig 0.17.1" and props["toolchain.target"] == "x86_64-linux-gnu.2.28"
    assert props["toolchain.glibc"] == "2.28"

    assert provenance.check_statement(st) == []
    bd = st["predicate"]["buildDefinition"]
    dep = next(d for d in bd["resolvedDependencies"] if d["name"] == "toolchain:ziglang-0.17.1")
    assert dep["uri"] == "pkg:pypi/ziglang@0.17.1" and dep["digest"] == {"sha256": ZIG_ID["sha256"]}
    assert dep["annotations"]["file"] == ZIG_ID["file"]
    assert (dep["annotations"]["target"], dep["annotations"]["glibc"]) == ("x86_64-linux-gnu.2.28", "2.28")
    assert bd["externalParameters"]["toolchain"] == ZIG_ID


def test_a_host_build_s_attestations_say_host(tmp_path: Path) -> None:
    bom, st = _attested(tmp_path, None)
    assert cyclonedx.errors(bom) == []
    assert not any("toolchain:" in c["bom-ref"] for c in bom["formulation"][0]["components"])
    props = _workflow_props(bom)
    assert props["toolchain"] == "host" and "toolchain.target" not in props
    bd = st["predicate"]["buildDefinition"]
    assert bd["externalParameters"]["toolchain"] == {"name": "host", "kind": "host"}
    assert not any(d["name"].startswith("toolchain:") for d in bd["resolvedDependencies"])


def test_verify_reads_the_toolchain_back_from_a_provenance(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a", toolchain_id=ZIG_ID)
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    facts, _ = attest.image_facts(Layout(layout))
    st = json.loads(referrers.referrers(Layout(layout), artifact_type=provenance.MEDIA_TYPE)[0].read())
    assert verify._llvm_spec_from_provenance(st, facts.labels).toolchain.as_json() == ZIG_ID
    del st["predicate"]["buildDefinition"]["externalParameters"]["toolchain"]  # an older provenance
    assert verify._llvm_spec_from_provenance(st, facts.labels).toolchain == record.HOST_TOOLCHAIN


# -- verify ---------------------------------------------------------------------------------------------------


def _no_build(*_: object, **__: object) -> NoReturn:
    raise AssertionError("verify must refuse before fetching or building")


@pytest.mark.parametrize(
    "change",
    [{"sha256": "00" * 32}, {"version": "0.16.0"}, {"file": "ziglang-0.17.1-py3-none-any.whl"}, {"wrappers": "1"},
     {"version": "0.16.0", "target": "x86_64-linux-gnu.2.17"}],  # the floor is selected, the version differs
)
def test_verify_refuses_a_record_built_with_another_toolchain_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, str]
) -> None:
    s = settings(tmp_path)
    recorded = ZIG_ID | change
    path = fake_llvm_build(tmp_path / "w", toolchain_id=recorded, recipe_digest=recipe.load(s.recipes_dir).digest())
    monkeypatch.setattr(llvm, "build", _no_build)
    monkeypatch.setattr(sources, "fetch", _no_build)
    monkeypatch.setattr(verify, "_release_archive", _no_build)
    report = verify.Report(str(path), "llvm", tmp_path / "rebuild")
    with pytest.raises(VerifyError) as err:
        verify.verify_llvm(s, path, report, False, lambda _: None)
    e = err.value
    assert e.what == "the toolchain in this checkout is not the one the artifact was built with"
    want = record.ToolchainRef.from_mapping(recorded)
    assert f"built with {want.label}; this checkout pins " in e.why
    floor = recorded["target"]  # the checkout's zig is selected at the recorded glibc floor
    assert f"this checkout pins zig 0.17.1 (sha256 {ZIG_ID['sha256']}, {floor})" in e.why
    assert f"differs in {', '.join(sorted(k for k in change if k != 'target'))})" in e.why
    assert "check out the commit" in e.fix
    assert not (tmp_path / "rebuild").exists() or not any((tmp_path / "rebuild").rglob("*.a"))


def test_verify_refuses_a_toolchain_this_checkout_does_not_define(tmp_path: Path) -> None:
    with pytest.raises(VerifyError) as err:
        verify._recorded_toolchain(settings(tmp_path), record.ToolchainRef("gcc13", "host"))
    assert "cannot select the toolchain" in err.value.what and "unknown toolchain 'gcc13'" in err.value.why


def test_verify_selects_the_recorded_toolchain_and_glibc_floor(tmp_path: Path) -> None:
    s = settings(tmp_path)
    tc = verify._recorded_toolchain(s, record.ToolchainRef.from_mapping(ZIG_ID))
    assert tc.identity() == ZIG_ID
    floor = ZIG_ID | {"target": "x86_64-linux-gnu.2.31"}  # another floor of the same pinned wheel
    assert verify._recorded_toolchain(s, record.ToolchainRef.from_mapping(floor)).identity() == floor
    assert verify._recorded_toolchain(s, record.HOST_TOOLCHAIN).kind == "host"  # whatever the checkout's default


# -- inspect --------------------------------------------------------------------------------------------------


def test_inspect_of_a_record_shows_its_toolchain(tmp_path: Path) -> None:
    zig = inspection.render(inspection.inspect_record(fake_llvm_build(tmp_path / "z", toolchain_id=ZIG_ID)))
    line = next(x for x in zig.splitlines() if x.strip().startswith("pinned_toolchain"))
    assert line.split(None, 1)[1] == f"zig 0.17.1 (sha256 {ZIG_ID['sha256']}, x86_64-linux-gnu.2.28)"
    host = inspection.render(inspection.inspect_record(fake_llvm_build(tmp_path / "h")))
    assert any(x.split() == ["pinned_toolchain", "host"] for x in host.splitlines())


def test_inspect_of_an_attested_image_shows_its_toolchain(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a", toolchain_id=ZIG_ID)
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    text = inspection.render(inspection.inspect_layout(layout))
    line = next(x for x in text.splitlines() if x.strip().startswith("pinned toolchain"))
    assert f"sha256={ZIG_ID['sha256']}" in line and "target=x86_64-linux-gnu.2.28" in line


def test_verify_report_names_the_toolchain(tmp_path: Path) -> None:
    report = verify.Report("x", "llvm", tmp_path, conditions={"toolchain": "zig 0.17.1 x86_64-linux-gnu.2.28"})
    assert "  toolchain zig 0.17.1 x86_64-linux-gnu.2.28 (the recorded one)" in report.render().splitlines()
