"""The tiny image's SBOM and provenance, attached as OCI referrers through the real registry.

docker-registry 2.8 has no referrers API, so push falls back to the tag schema
(`sha256-<hex>` index) and pull discovers them there; the image digest stays the
same for the registry, for skopeo and for us.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic
from hermetic.attest import provenance, sbom
from hermetic.model import record
from hermetic.oci import referrers
from hermetic.oci.layout import Layout, pick_root
from hermetic.oci.types import MT_INDEX, MT_MANIFEST
from hermetic.plan import substitute
from schemas import cyclonedx


@pytest.fixture(scope="module")
def image(tiny_install: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("attest") / "tiny-support"
    proc = hermetic("image", "llvm", "--record", str(tiny_install), "--output", str(out))
    assert "sbom sha256:" in proc.stderr and "provenance sha256:" in proc.stderr, proc.stderr
    assert "build-record sha256:" in proc.stderr, proc.stderr
    return out


def _payloads(layout: Path) -> dict[str, Any]:
    return {r.kind: json.loads(r.read()) for r in referrers.referrers(Layout(layout))}


def test_image_sbom_and_provenance_of_the_real_build(image: Path, tiny_install: Path) -> None:
    rec = json.loads(tiny_install.read_text())
    digest = pick_root(Layout(image)).digest
    docs = _payloads(image)
    bom, st = docs["sbom"], docs["provenance"]
    assert cyclonedx.errors(bom) == []
    assert sbom.subject_sha256(bom) == digest.removeprefix("sha256:")
    src = rec["sources"][0]
    comp = sbom.find_component(bom, f"source:{src['file']}")
    assert comp["hashes"] == [{"alg": "SHA-256", "content": src["sha256"]}]
    assert sbom.property_of(comp, "origin") == src["origin"]
    assert sbom.find_component(bom, "source:pruned")["hashes"][0]["content"] == rec["pruned"]["sha256"]
    tree = sbom.find_component(bom, "llvm-tree")
    assert sbom.property_of(tree, "tree.digest") == rec["tree"]["digest"]
    assert sbom.property_of(tree, "option.components") == rec["options"]["components"]
    tools = {c["name"]: c for c in bom["formulation"][0]["components"]}
    pinned = rec.get("toolchain_id") or {"kind": "host"}
    if pinned["kind"] == "zig":  # the pinned toolchain wheel, with its sha256
        assert tools.pop("ziglang")["hashes"] == [{"alg": "SHA-256", "content": pinned["sha256"]}]
    assert set(tools) == {"cc", "cxx", "cmake", "ninja", "conan", "python"}
    assert all(c["version"][0].isdigit() for c in tools.values()), tools

    assert provenance.check_statement(st) == []
    assert provenance.subject_sha256s(st) == [digest.removeprefix("sha256:")]
    internal = st["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["offline"]["enforced"] == rec["offline"]["enforced"]
    assert internal["offline"]["method"] == rec["offline"]["method"]
    ext = st["predicate"]["buildDefinition"]["externalParameters"]
    assert (ext["variant"], ext["recipe"]["digest"][provenance.RECIPE_DIGEST]) == ("support", rec["recipe"]["digest"])


def test_attestations_round_trip_through_the_registry(
    image: Path, registry: Any, tmp_path: Path, tiny_install: Path
) -> None:
    tiny_record = tiny_install
    repo = "attest/tiny-support-1.0.0"
    ref = f"{registry.host}/{repo}:1.0.0"
    digest = pick_root(Layout(image)).digest
    pushed = hermetic("push", str(image), ref, "--insecure")
    lines = pushed.stdout.splitlines()
    assert lines[0] == f"{ref} {digest}"
    assert len([x for x in lines if x.endswith(f"-> {digest} (tag-schema)")]) == 3, pushed.stdout
    # the tag substituting machines find it by (tests/integration/test_substitute_registry.py)
    inputs_tag = substitute.inputs_tag(json.loads(tiny_record.read_text())["inputs_digest"])
    assert lines[-1] == f"{registry.host}/{repo}:{inputs_tag} {digest} (inputs tag, for --substitute)"

    # the registry has no referrers API: the index lives under the fallback tag
    status, _, _ = registry.get(f"/v2/{repo}/referrers/{digest}")
    assert status == 404
    fallback = "sha256-" + digest.removeprefix("sha256:")
    assert sorted(registry.tags(repo)) == sorted(["1.0.0", fallback, inputs_tag])
    status, body, headers = registry.get(f"/v2/{repo}/manifests/{fallback}", accept=MT_INDEX)
    index = json.loads(body)
    assert status == 200 and index["mediaType"] == MT_INDEX
    assert sorted(m["artifactType"] for m in index["manifests"]) == sorted(
        [sbom.MEDIA_TYPE, provenance.MEDIA_TYPE, record.RECORD_MEDIA_TYPE])
    for m in index["manifests"]:
        status, body, _ = registry.get(f"/v2/{repo}/manifests/{m['digest']}", accept=MT_MANIFEST)
        assert json.loads(body)["subject"]["digest"] == digest

    # the image digest did not change, for the registry and for skopeo
    status, body, headers = registry.get(f"/v2/{repo}/manifests/1.0.0", accept=MT_MANIFEST)
    assert headers.get("Docker-Content-Digest") == digest
    if shutil.which("skopeo") is None:
        pytest.fail("skopeo is missing: install Debian's skopeo package (.ci/setup does)")
    out = subprocess.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["Digest"] == digest

    # pushing again adds nothing
    hermetic("push", str(image), ref, "--insecure")
    _, body, _ = registry.get(f"/v2/{repo}/manifests/{fallback}", accept=MT_INDEX)
    assert len(json.loads(body)["manifests"]) == 3

    # pull them back: into a layout, next to an unpacked tree, and look at the reference itself
    pulled = tmp_path / "pulled"
    out = hermetic("pull", ref, "--layout", str(pulled), "--insecure", "--with-attestations").stdout
    assert out.splitlines()[0] == f"{ref} {digest} {pulled.resolve()}"
    assert pick_root(Layout(pulled)).digest == digest
    assert _payloads(pulled) == _payloads(image)
    report = json.loads(hermetic("inspect", str(pulled), "--json").stdout)
    assert {k: v["status"] for k, v in report["attestations"].items()} == {
        "sbom": "matches", "provenance": "matches", "build-record": "matches"}

    unpacked = tmp_path / "opt" / "tiny"
    hermetic("pull", ref, "--unpack", str(unpacked), "--insecure", "--with-attestations")
    side = unpacked.with_name("tiny.attestations")
    assert json.loads((side / "sbom.cdx.json").read_text()) == _payloads(image)["sbom"]
    assert json.loads((side / "provenance.intoto.json").read_text()) == _payloads(image)["provenance"]
    assert json.loads((side / "record.json").read_text()) == json.loads(tiny_record.read_text())
    assert not (unpacked / "sbom.cdx.json").exists(), "attestations stay out of the image's filesystem"

    remote = json.loads(hermetic("inspect", ref, "--insecure", "--json").stdout)
    assert remote["artifact"]["digest"] == digest
    assert {v["status"] for v in remote["attestations"].values()} == {"matches"}
    assert {v["found"] for v in remote["attestations"].values()} == {"registry (tag-schema)"}
    text = hermetic("inspect", ref, "--insecure").stdout
    assert f"digest    {digest}" in text and "sbom        matches" in text


def test_push_without_attestations(image: Path, registry: Any) -> None:
    repo = "attest/bare"
    hermetic("push", str(image), f"{registry.host}/{repo}:1", "--insecure", "--no-attestations")
    assert registry.tags(repo) == ["1"]
    proc = hermetic("inspect", f"{registry.host}/{repo}:1", "--insecure", "--json")
    assert {v["status"] for v in json.loads(proc.stdout)["attestations"].values()} == {"missing"}


def test_a_multi_platform_index_carries_each_platform_s_attestations(
    tiny_install: Path, registry: Any, tmp_path: Path
) -> None:
    """`image index` keeps each platform image's SBOM and provenance; push publishes them; pull and
    inspect with --platform get that platform's image and its own attestations. (The arm64 entry is
    this machine's tree under an arm64 label: what is tested here is the index, not the cross build,
    which tests/integration/test_oci_platforms.py and tests/functional/test_arch_arm64.py cover.)"""
    layouts = {}
    for arch in ("amd64", "arm64"):
        layouts[arch] = tmp_path / arch
        hermetic("image", "llvm", "--record", str(tiny_install), "--arch", arch, "--output", str(layouts[arch]))
    digests = {arch: pick_root(Layout(path)).digest for arch, path in layouts.items()}
    multi = tmp_path / "multi"
    hermetic("image", "index", str(layouts["arm64"]), str(layouts["amd64"]), "--output", str(multi))
    assert {(r.subject, r.kind) for r in referrers.referrers(Layout(multi))} == {
        (d, kind) for d in digests.values() for kind in ("sbom", "provenance", "build-record")
    }

    ref = f"{registry.host}/attest/multi:1.0.0"
    pushed = hermetic("push", str(multi), ref, "--insecure").stdout
    for d in digests.values():
        assert len([x for x in pushed.splitlines() if x.endswith(f"-> {d} (tag-schema)")]) == 3, pushed
        # each platform image is found by its own inputs digest (here both come from one record, so one tag
        # is written twice and names the last platform pushed: real arm64 and amd64 builds differ in inputs)
        assert any(x.endswith(f" {d} (inputs tag, for --substitute)") for x in pushed.splitlines()), pushed

    for arch in ("arm64", "amd64"):
        pulled = tmp_path / f"pulled-{arch}"
        out = hermetic("pull", ref, "--layout", str(pulled), "--insecure", "--with-attestations",
                       "--platform", f"linux/{arch}").stdout
        assert out.splitlines()[0] == f"{ref} {digests[arch]} {pulled.resolve()}"
        assert _payloads(pulled) == _payloads(layouts[arch])
        report = json.loads(hermetic("inspect", ref, "--insecure", "--json", "--platform", f"linux/{arch}").stdout)
        assert report["artifact"]["digest"] == digests[arch]
        assert {v["status"] for v in report["attestations"].values()} == {"matches"}
