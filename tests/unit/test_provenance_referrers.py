"""Referrers in a registry, against an in-process fake of both kinds: with the OCI 1.1 referrers API and without.

The real registry of the integration tier (docker-registry 2.8) has no referrers
API, so the API path is tested here: push must not write the fallback tag when
the registry answers OCI-Subject, and discovery must use /referrers/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_registry import Fake, serving
from hermetic.attest import attach as attest
from hermetic.attest import provenance, sbom
from hermetic.core.errors import VerifyError
from hermetic.model import record
from hermetic.oci import referrers, referrers_registry
from hermetic.oci.layout import Layout
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import pull_layout, push_layout
from hermetic.oci.types import MT_INDEX, parse_reference
from schemas.examples import fake_image, fake_llvm_build, settings

pytestmark = pytest.mark.unit


@pytest.fixture(params=[True, False], ids=["referrers-api", "tag-schema"])
def fake(request: pytest.FixtureRequest) -> Iterator[Fake]:
    with serving(request.param) as server:
        yield server


def test_push_and_pull_attestations(fake: Fake, tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a")
    layout_path = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout_path, rec)
    layout = Layout(layout_path)
    ref = parse_reference(f"{fake.host}/llvm:19.1.7")
    with RegistryClient(fake.host, insecure=True) as client:
        pushed = push_layout(client, layout, ref)
        sent = referrers_registry.push_referrers(client, layout, "llvm", {pushed.digest})
        again = referrers_registry.push_referrers(client, layout, "llvm", {pushed.digest})
    via = referrers.VIA_API if fake.api else referrers.VIA_TAG
    kinds = sorted([sbom.MEDIA_TYPE, provenance.MEDIA_TYPE, record.RECORD_MEDIA_TYPE])
    assert sorted(p.artifact_type for p in sent) == kinds
    assert {p.via for p in sent} == {via} and {p.subject for p in sent} == {pushed.digest}
    tag = referrers.fallback_tag(pushed.digest)
    assert tag == "sha256-" + pushed.digest.removeprefix("sha256:")
    if fake.api:
        assert tag not in fake.manifests, "a registry with the referrers API keeps its own index"
    else:
        mt, body = fake.manifests[tag]
        index = json.loads(body)
        assert mt == MT_INDEX and index["mediaType"] == MT_INDEX
        assert sorted(m["digest"] for m in index["manifests"]) == sorted(p.digest for p in sent)
        assert len(again) == 3 and len(index["manifests"]) == 3, "pushing twice does not duplicate entries"
        assert sorted(m["artifactType"] for m in index["manifests"]) == kinds
    # the image under its tag is still the image
    assert fake.manifests["19.1.7"][1] == layout.read_blob(next(iter(layout.index())))

    dest = tmp_path / "pulled"
    with RegistryClient(fake.host, insecure=True) as client:
        desc = pull_layout(client, ref, dest)
        fake.paths.clear()
        got, how = referrers_registry.pull_referrers(client, "llvm", desc.digest, Layout(dest))
        only_sbom, _ = referrers_registry.list_referrers(client, "llvm", desc.digest, sbom.MEDIA_TYPE)
    assert how == via
    assert any("/referrers/" in p for p in fake.paths), "discovery asks the referrers API first"
    assert sorted(r.kind for r in got) == ["build-record", "provenance", "sbom"]
    assert [m["artifactType"] for m in only_sbom] == [sbom.MEDIA_TYPE]
    for r in got:
        original = referrers.referrers(layout, artifact_type=r.artifact_type)[0]
        assert r.read() == original.read() and r.digest == original.digest


def test_a_referrer_about_another_image_is_refused(fake: Fake, tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a")
    layout_path = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout_path, rec)
    layout = Layout(layout_path)
    ref = parse_reference(f"{fake.host}/llvm:1")
    with RegistryClient(fake.host, insecure=True) as client:
        pushed = push_layout(client, layout, ref)
        sent = referrers_registry.push_referrers(client, layout, "llvm", {pushed.digest})
        # a forged index (tag schema) that lists an artifact about this image under another subject
        other = "sha256:" + "0" * 64
        index = {"schemaVersion": 2, "mediaType": MT_INDEX,
                 "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sent[0].digest,
                                "size": 1, "artifactType": sent[0].artifact_type}]}
        client.put_manifest("llvm", referrers.fallback_tag(other), MT_INDEX, json.dumps(index).encode())
        fake.api = False
        dest = Layout(tmp_path / "x")
        dest.init()
        with pytest.raises(VerifyError, match="about something else"):
            referrers_registry.pull_referrers(client, "llvm", other, dest)
