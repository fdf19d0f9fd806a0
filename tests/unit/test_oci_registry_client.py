"""Registry client pieces: references, credentials, challenges, Basic and Bearer auth against an in-process fake."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_http import FakeHandler, FakeServer
from hermetic.core.errors import RegistryError, UsageError
from hermetic.oci.http import find_credentials, parse_challenge
from hermetic.oci.layout import Layout
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import push_layout
from hermetic.oci.types import MT_MANIFEST, Descriptor, canonical_json, parse_reference

pytestmark = pytest.mark.unit


def test_parse_reference() -> None:
    r = parse_reference("127.0.0.1:5000/llvm-support-19.1.7:19.1.7")
    assert (r.registry, r.repository, r.tag, r.digest) == ("127.0.0.1:5000", "llvm-support-19.1.7", "19.1.7", "")
    assert parse_reference("ubuntu").repository == "library/ubuntu"
    assert parse_reference("ghcr.io/org/llvm@sha256:" + "a" * 64).reference == "sha256:" + "a" * 64
    assert parse_reference("localhost/x").reference == "latest"
    for bad in ["", "http://x/y", "Reg/UPPER", "x y", "a@sha256:zz"]:
        with pytest.raises(UsageError):
            parse_reference(bad)


def test_credentials_env_then_files(tmp_path: Path) -> None:
    assert find_credentials("r.io", {"HERMETIC_REGISTRY_USER": "u", "HERMETIC_REGISTRY_PASSWORD": "p"}, tmp_path) == (
        "u",
        "p",
    )
    assert find_credentials("r.io", {}, tmp_path) is None
    docker = tmp_path / ".docker" / "config.json"
    docker.parent.mkdir()
    docker.write_text(json.dumps({"auths": {"https://r.io/v1/": {"auth": base64.b64encode(b"d:pw:x").decode()}}}))
    assert find_credentials("r.io", {}, tmp_path) == ("d", "pw:x")
    run = tmp_path / "run" / "containers" / "auth.json"
    run.parent.mkdir(parents=True)
    run.write_text(json.dumps({"auths": {"r.io": {"auth": base64.b64encode(b"c:1").decode()}}}))
    assert find_credentials("r.io", {"XDG_RUNTIME_DIR": str(tmp_path / "run")}, tmp_path) == ("c", "1")
    docker.write_text("{not json")
    with pytest.raises(UsageError):
        find_credentials("r.io", {}, tmp_path)


def test_parse_challenge() -> None:
    scheme, p = parse_challenge(
        'Bearer realm="https://auth.io/token",service="registry.io",scope="repository:a/b:pull,push"'
    )
    assert scheme == "bearer" and p == {
        "realm": "https://auth.io/token",
        "service": "registry.io",
        "scope": "repository:a/b:pull,push",
    }
    assert parse_challenge('Basic realm="x"') == ("basic", {"realm": "x"})


class Fake(FakeServer):
    def __init__(self, auth: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.auth = auth
        self.blobs: dict[str, bytes] = {}
        self.uploads: dict[str, bytes] = {}
        self.manifests: dict[str, bytes] = {}
        self.token_requests: list[str] = []



class _Handler(FakeHandler):
    server: Fake

    def authorised(self) -> bool:
        got = self.headers.get("Authorization", "")
        basic = "Basic " + base64.b64encode(b"user:secret").decode()
        if self.server.auth == "basic" and got != basic:
            self.reply(401, WWW_Authenticate='Basic realm="fake"')
            return False
        if self.server.auth == "bearer" and got != "Bearer tok-123":
            realm = f"http://{self.server.host}/token"
            self.reply(401, WWW_Authenticate=f'Bearer realm="{realm}",service="fake"')
            return False
        return True

    def handle_any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        if path == "/token":
            self.server.token_requests.append(query)
            ok = self.headers.get("Authorization") == "Basic " + base64.b64encode(b"user:secret").decode()
            return self.reply(200, b'{"token":"tok-123"}') if ok else self.reply(401)
        if not self.authorised():
            return None
        parts = path.split("/")
        if "uploads" in parts:
            uid = parts[-1] if parts[-1] else "u1"
            if self.command == "POST":
                self.server.uploads[uid] = b""
                return self.reply(202, Location=f"/v2/x/blobs/uploads/{uid}")
            self.server.uploads[uid] += body
            if self.command == "PUT":
                digest = query.split("digest=")[1].replace("%3A", ":")
                data = self.server.uploads.pop(uid)
                if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
                    return self.reply(400)
                self.server.blobs[digest] = data
                return self.reply(201)
            return self.reply(202, Location=f"/v2/x/blobs/uploads/{uid}")
        if "blobs" in parts:
            data = self.server.blobs.get(parts[-1])
            return self.reply(404) if data is None else self.reply(200, data)
        if "manifests" in parts:
            if self.command == "PUT":
                self.server.manifests[parts[-1]] = body
                return self.reply(201, Docker_Content_Digest="sha256:" + hashlib.sha256(body).hexdigest())
            return self.reply(200 if parts[-1] in self.server.manifests or parts[-1] in self.server.blobs else 404)
        return self.reply(404)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = handle_any


@pytest.fixture
def tiny_layout(tmp_path: Path) -> Layout:
    layout = Layout(tmp_path / "l")
    layout.init()
    layer = layout.put_bytes(b"x" * 3000)
    config = canonical_json({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": layout.put_bytes(config),
                "size": len(config),
            },
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 3000}],
        }
    )
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest))])
    return layout


def serve(auth: str) -> Iterator[Fake]:
    fake = Fake(auth)
    t = threading.Thread(target=fake.serve_forever, daemon=True)
    t.start()
    yield fake
    fake.shutdown()
    fake.server_close()


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_push_with_auth(auth: str, tiny_layout: Layout) -> None:
    for fake in serve(auth):
        with RegistryClient(fake.host, insecure=True, credentials=("user", "secret")) as client:
            push_layout(client, tiny_layout, parse_reference(f"{fake.host}/x:1"), chunk_size=1000)
        assert fake.manifests.keys() == {"1"}
        assert len(fake.blobs) == 2
        if auth == "bearer":
            assert fake.token_requests and "scope=repository%3Ax%3Apull%2Cpush" in fake.token_requests[0]


@pytest.mark.parametrize("auth", ["basic", "bearer"])
def test_wrong_or_missing_credentials_are_refused(auth: str, tiny_layout: Layout) -> None:
    for fake in serve(auth):
        for creds in (None, ("user", "wrong")):
            with RegistryClient(fake.host, insecure=True, credentials=creds, retries=0) as client:
                with pytest.raises(RegistryError):
                    push_layout(client, tiny_layout, parse_reference(f"{fake.host}/x:1"))
        assert not fake.manifests


def test_chunked_upload_bounds_consecutive_failures_not_total(tmp_path: Path) -> None:
    """A long upload over a flaky link fails often but keeps progressing: it must finish."""
    from email.message import Message

    from hermetic.oci.registry import TransientRegistryError, _Response

    blob = tmp_path / "blob"
    blob.write_bytes(bytes(range(256)) * 40)  # 10 chunks of 1 KiB
    client = RegistryClient("127.0.0.1:1", insecure=True, retries=2, backoff=0.0)
    received = bytearray()
    calls = {"patch": 0}

    def fake_request(method: str, url: str, **kw: object) -> _Response:
        assert method == "PATCH"
        calls["patch"] += 1
        if calls["patch"] % 2 == 0:  # every other PATCH fails: 1 consecutive failure, 9 in all
            raise TransientRegistryError("PATCH answered 503")
        body = kw["body"]
        assert isinstance(body, bytes)
        received.extend(body)
        return _Response(202, Message(), b"")

    client.request = fake_request  # type: ignore[method-assign, assignment]
    client._upload_status = lambda location: (location, len(received))  # type: ignore[method-assign]
    client._sleep = lambda attempt: None  # type: ignore[method-assign]
    with open(blob, "rb") as f:
        client._upload_chunks(f, "/upload", blob.stat().st_size, 1024)
    assert bytes(received) == blob.read_bytes()
    assert calls["patch"] > 2 * client.retries
