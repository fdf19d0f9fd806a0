"""Referrers in a registry, against an in-process fake of both kinds: with the OCI 1.1 referrers API and without.

The real registry of the integration tier (docker-registry 2.8) has no referrers
API, so the API path is tested here: push must not write the fallback tag when
the registry answers OCI-Subject, and discovery must use /referrers/.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_http import FakeHandler, FakeServer
from hermetic import attest, provenance, sbom
from hermetic.errors import VerifyError
from hermetic.oci import referrers
from hermetic.oci.layout import MT_INDEX, Layout
from hermetic.oci.reference import parse_reference
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import pull_layout, push_layout
from schemas.examples import fake_image, fake_llvm_build, settings

pytestmark = pytest.mark.unit


class Fake(FakeServer):
    def __init__(self, api: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        self.blobs: dict[str, bytes] = {}
        self.uploads: dict[str, bytes] = {}
        self.manifests: dict[str, tuple[str, bytes]] = {}  # reference -> (media type, body)
        self.paths: list[str] = []



class _Handler(FakeHandler):
    server: Fake

    def handle_any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        self.server.paths.append(f"{self.command} {path}")
        parts = path.split("/")
        if path == "/v2/":
            return self.reply(200)
        if "uploads" in parts:
            uid = parts[-1] or "u1"
            if self.command == "POST":
                self.server.uploads[uid] = b""
                return self.reply(202, Location=f"/v2/r/blobs/uploads/{uid}")
            data = self.server.uploads.pop(uid) + body
            digest = query.split("digest=")[1].replace("%3A", ":")
            assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
            self.server.blobs[digest] = data
            return self.reply(201)
        if "blobs" in parts:
            data = self.server.blobs.get(parts[-1])
            return self.reply(404) if data is None else self.reply(200, data)
        if "referrers" in parts:
            if not self.server.api:
                return self.reply(404, b"404 page not found\n")
            subject = parts[-1]
            found = []
            for ref, (mt, doc) in self.server.manifests.items():
                m = json.loads(doc)
                if ref.startswith("sha256:") and (m.get("subject") or {}).get("digest") == subject:
                    found.append({"mediaType": mt, "digest": ref, "size": len(doc),
                                  "artifactType": m.get("artifactType"), "annotations": m.get("annotations") or {}})
            index = json.dumps({"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": found}).encode()
            return self.reply(200, index, Content_Type=MT_INDEX)
        if "manifests" in parts:
            ref = parts[-1]
            if self.command == "PUT":
                digest = "sha256:" + hashlib.sha256(body).hexdigest()
                mt = self.headers.get("Content-Type", "")
                self.server.manifests[ref] = self.server.manifests[digest] = (mt, body)
                extra = {}
                subject = (json.loads(body).get("subject") or {}).get("digest")
                if self.server.api and subject:
                    extra["OCI_Subject"] = subject
                return self.reply(201, Docker_Content_Digest=digest, **extra)
            if ref not in self.server.manifests:
                return self.reply(404)
            mt, doc = self.server.manifests[ref]
            return self.reply(200, doc, Content_Type=mt)
        return self.reply(404)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = handle_any


@pytest.fixture(params=[True, False], ids=["referrers-api", "tag-schema"])
def fake(request: pytest.FixtureRequest) -> Iterator[Fake]:
    server = Fake(api=request.param)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


def test_push_and_pull_attestations(fake: Fake, tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "a")
    layout_path = fake_image(rec, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout_path, rec)
    layout = Layout(layout_path)
    ref = parse_reference(f"{fake.host}/llvm:19.1.7")
    with RegistryClient(fake.host, insecure=True) as client:
        pushed = push_layout(client, layout, ref)
        sent = referrers.push_referrers(client, layout, "llvm", {pushed.digest})
        again = referrers.push_referrers(client, layout, "llvm", {pushed.digest})
    via = referrers.VIA_API if fake.api else referrers.VIA_TAG
    assert sorted(p.artifact_type for p in sent) == sorted([sbom.MEDIA_TYPE, provenance.MEDIA_TYPE])
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
        assert len(again) == 2 and len(index["manifests"]) == 2, "pushing twice does not duplicate entries"
        assert all(m["artifactType"] in (sbom.MEDIA_TYPE, provenance.MEDIA_TYPE) for m in index["manifests"])
    # the image under its tag is still the image
    assert fake.manifests["19.1.7"][1] == layout.read_blob(next(iter(layout.index())))

    dest = tmp_path / "pulled"
    with RegistryClient(fake.host, insecure=True) as client:
        desc = pull_layout(client, ref, dest)
        fake.paths.clear()
        got, how = referrers.pull_referrers(client, "llvm", desc.digest, Layout(dest))
        only_sbom, _ = referrers.list_referrers(client, "llvm", desc.digest, sbom.MEDIA_TYPE)
    assert how == via
    assert any("/referrers/" in p for p in fake.paths), "discovery asks the referrers API first"
    assert sorted(r.kind for r in got) == ["provenance", "sbom"]
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
        sent = referrers.push_referrers(client, layout, "llvm", {pushed.digest})
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
            referrers.pull_referrers(client, "llvm", other, dest)
