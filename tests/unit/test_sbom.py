"""CycloneDX 1.6 SBOMs of images and wheels: valid against the official schema, complete, reproducible."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hermetic.attest import attach as attest
from hermetic.attest import sbom
from hermetic.core.digests import file_sha256
from hermetic.model import record
from hermetic.oci import referrers
from hermetic.oci.layout import Layout
from schemas import cyclonedx
from schemas.examples import DEBIAN_ORIG, EPOCH, fake_image, fake_llvm_build, fake_wheel, settings

pytestmark = pytest.mark.unit


def _image_sbom(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    rec = fake_llvm_build(tmp_path / "a")
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    got = referrers.referrers(Layout(layout), artifact_type=sbom.MEDIA_TYPE)
    assert len(got) == 1
    return json.loads(got[0].read()), layout


def _spdx_ids() -> set[str]:
    doc = json.loads((cyclonedx.HERE / "spdx.SNAPSHOT.schema.json").read_text())
    return set(doc["enum"])


def _licenses(bom: dict[str, Any]) -> list[str]:
    comps = [bom["metadata"]["component"], *bom["components"]]
    return [lic["expression"] for c in comps for lic in c.get("licenses") or []]


def _refs_are_consistent(bom: dict[str, Any]) -> None:
    all_components = [bom["metadata"]["component"], *bom["components"]]
    for f in bom["formulation"]:
        all_components += f["components"]
    refs = [c["bom-ref"] for c in all_components if "bom-ref" in c]
    assert len(refs) == len(set(refs)), "bom-refs must be unique"
    for dep in bom["dependencies"]:
        assert dep["ref"] in refs and set(dep["dependsOn"]) <= set(refs), dep
    for f in bom["formulation"]:
        for w in f["workflows"]:
            for io in [*w.get("inputs", []), *w.get("outputs", [])]:
                if "resource" in io:
                    assert io["resource"]["ref"] in refs, io


def test_image_sbom_validates_against_the_cyclonedx_1_6_schema(tmp_path: Path) -> None:
    bom, _ = _image_sbom(tmp_path)
    assert cyclonedx.errors(bom) == []
    assert bom["$schema"] == sbom.SCHEMA_URL and bom["specVersion"] == "1.6"
    _refs_are_consistent(bom)


def test_the_schema_check_is_not_vacuous(tmp_path: Path) -> None:
    bom, _ = _image_sbom(tmp_path)
    broken = copy.deepcopy(bom)
    broken["components"][1]["hashes"][0]["content"] = "not-a-digest"
    broken["metadata"]["component"]["type"] = "tarball"
    del broken["formulation"][0]["workflows"][0]["uid"]
    problems = cyclonedx.errors(broken)
    assert any("hashes/0/content" in p for p in problems), problems
    assert any("metadata/component/type" in p for p in problems), problems
    assert any("uid" in p for p in problems), problems


def test_image_sbom_names_what_the_image_was_built_from(tmp_path: Path) -> None:
    bom, layout = _image_sbom(tmp_path)
    facts, _ = attest.image_facts(Layout(layout))
    meta = bom["metadata"]["component"]
    assert meta["type"] == "container" and sbom.subject_sha256(bom) == facts.manifest_digest.removeprefix("sha256:")
    assert meta["purl"].startswith("pkg:oci/llvm-support-19.1.7@sha256%3A")
    # the release archive: sha256 and origin (the Debian source package it came through)
    src = sbom.find_component(bom, "source:llvm-toolchain-19_19.1.7.orig.tar.xz")
    assert src["hashes"] == [{"alg": "SHA-256", "content": DEBIAN_ORIG}]
    assert sbom.property_of(src, "origin") == "apt:llvm-toolchain-19=1:19.1.7-3~deb12u1"
    assert src["purl"] == "pkg:deb/debian/llvm-toolchain-19@1:19.1.7-3~deb12u1?arch=source"
    # the pruned source: its digest and that it derives from the archive
    pruned = sbom.find_component(bom, "source:pruned")
    assert pruned["hashes"][0]["content"] == "79" * 32
    assert pruned["pedigree"]["ancestors"][0]["hashes"][0]["content"] == DEBIAN_ORIG
    # recipe, variant, resolved options
    tree = sbom.find_component(bom, "llvm-tree")
    assert sbom.property_of(sbom.find_component(bom, "recipe:llvm"), "recipe.digest") == "ab" * 32
    assert sbom.property_of(tree, "variant") == "support"
    assert sbom.property_of(tree, "option.components") == "LLVMDemangle;LLVMSupport;llvm-headers;cmake-exports"
    assert sbom.property_of(tree, "option.targets") == "X86"
    assert sbom.property_of(tree, "tree.digest") == facts.labels["io.hermetic.tree.digest"]
    # toolchain versions, in the formulation
    tools = {c["name"]: c["version"] for c in bom["formulation"][0]["components"]}
    assert tools == {"cc": "12.2.0", "cxx": "12.2.0", "cmake": "4.4.4", "ninja": "1.13.2", "conan": "2.34.0",
                     "python": "3.11.7"}
    build = bom["formulation"][0]["workflows"][0]
    props = {p["name"]: p["value"] for p in build["properties"]}
    assert props["hermetic:offline.enforced"] == "true" and props["hermetic:offline.method"] == "netns"
    env = [e for i in build["inputs"] for e in i.get("environmentVars", [])]
    assert {"name": "SOURCE_DATE_EPOCH", "value": str(EPOCH)} in env
    # licenses: LLVM's, and the recipe's (hermetic's own), as SPDX expressions of known ids
    assert set(_licenses(bom)) == {"Apache-2.0 WITH LLVM-exception", "Apache-2.0"}
    assert {"Apache-2.0", "LLVM-exception"} <= _spdx_ids()


def test_image_sbom_is_reproducible_and_keyed_by_the_image(tmp_path: Path) -> None:
    first, _ = _image_sbom(tmp_path / "one")
    second, _ = _image_sbom(tmp_path / "two")
    assert sbom.dumps(first) == sbom.dumps(second), "same image, same SBOM bytes"
    assert first["metadata"]["timestamp"] == "2025-01-14T00:00:00Z"
    other, _ = _image_sbom_of_other_tree(tmp_path / "three")
    assert other["serialNumber"] != first["serialNumber"]


def _image_sbom_of_other_tree(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    rec = fake_llvm_build(tmp_path / "a", seed="1")
    layout = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec)
    return json.loads(referrers.referrers(Layout(layout), artifact_type=sbom.MEDIA_TYPE)[0].read()), layout


def test_wheel_sbom_against_debian_llvm(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "dist")
    art = attest.find_wheel(wheel)
    bom = sbom.wheel_sbom(
        art.record, license_expression=attest.wheel_license(wheel), llvm_record=None,
        llvm_origin=sbom.LLVMOrigin("llvm-19-dev", "1:19.1.7-3~deb12u1", "amd64", "llvm-toolchain-19"),
        canonical={},
    )
    assert cyclonedx.errors(bom) == []
    _refs_are_consistent(bom)
    assert sbom.subject_sha256(bom) == file_sha256(wheel)
    assert bom["metadata"]["component"]["licenses"] == [{"expression": "Apache-2.0"}]
    llvm = sbom.find_component(bom, "llvm-tree")
    assert llvm["purl"] == "pkg:deb/debian/llvm-19-dev@1:19.1.7-3~deb12u1?arch=amd64"
    assert llvm["licenses"] == [{"expression": "Apache-2.0 WITH LLVM-exception"}]
    assert sbom.find_component(bom, "nanobind")["licenses"] == [{"expression": "BSD-3-Clause"}]
    tools = {c["name"]: c.get("version") for c in bom["formulation"][0]["components"]}
    for name, version in {"scikit-build-core": "1.1.2", "nanobind": "3.1.0", "cmake": "4.4.4", "ninja": "1.13.2",
                          "cpython": "3.11.7", "cxx": "12.2.0"}.items():
        assert tools.get(name) == version, (name, tools)
    # what the host's gcc links into the extension: libgcc/libstdc++'s static parts, glibc's start files
    assert set(_licenses(bom)) == {"Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-3-Clause",
                                   "GPL-3.0-or-later WITH GCC-exception-3.1", "LGPL-2.1-or-later WITH GCC-exception-2.0"}


def test_wheel_sbom_against_a_hermetic_llvm_carries_its_sources(tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "a")
    rec = record.load_build_record(rec_path)
    ref = {"path": str(rec_path), "variant": "support", "inputs_digest": rec.inputs_digest,
           "tree_digest": rec.tree.digest}
    wheel = fake_wheel(tmp_path / "dist", llvm_prefix=rec.install_root + rec.prefix, llvm_record=ref)
    sbom_path, prov_path = attest.attest_wheel(settings(tmp_path), wheel)
    assert (sbom_path.name, prov_path.name) == (wheel.name + ".cdx.json", wheel.name + ".intoto.json")
    bom = json.loads(sbom_path.read_text())
    assert cyclonedx.errors(bom) == []
    _refs_are_consistent(bom)
    assert sbom.find_component(bom, "source:pruned")["hashes"][0]["content"] == "79" * 32
    assert sbom.property_of(sbom.find_component(bom, "llvm-tree"), "tree.digest") == rec.tree.digest
    tools = {c["name"] for c in bom["formulation"][0]["components"]}
    assert {"conan", "cmake", "ninja", "scikit-build-core", "nanobind", "cc", "cxx"} <= tools


def test_tool_version_and_origins() -> None:
    assert sbom.tool_version("cc (Debian 12.2.0-14) 12.2.0") == "12.2.0"
    assert sbom.tool_version("Conan version 2.34.0") == "2.34.0"
    assert sbom.origin_uri("url:https://x/y.tar.xz") == "https://x/y.tar.xz"
    assert sbom.origin_uri("apt:llvm-toolchain-19=1:19.1.7-3") == "pkg:deb/debian/llvm-toolchain-19@1:19.1.7-3?arch=source"
    assert sbom.origin_uri("mirror:/srv/m/x.tar.xz", "https://canonical") == "https://canonical"
