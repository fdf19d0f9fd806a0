"""What the registry client follows and whom it trusts: blob redirects, token realms, token lifetimes, size caps.

In-process fakes on loopback (the registry on 127.0.0.1, its "storage" and "token service" on 127.0.0.2, another
host); the real registry, TLS and the real token flow are in tests/integration/test_registry_wild.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_http import FakeHandler, FakeServer
from hermetic.core.errors import RegistryError, VerifyError
from hermetic.oci.http import DEFAULT_MAX_DOCUMENT, set_document_limit
from hermetic.oci.layout import Layout
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import pull_layout, push_layout
from hermetic.oci.types import MT_CONFIG, MT_MANIFEST, Descriptor, canonical_json, parse_reference

pytestmark = pytest.mark.unit

LAYER = b"layer bytes " * 100
CONFIG = canonical_json({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_of(config: bytes = CONFIG, config_size: int | None = None) -> bytes:
    return canonical_json({
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": digest(config), "size": len(config) if config_size is None else config_size},
        "layers": [],
    })


class Server(FakeServer):
    """A server whose answers a test writes as a function of (method, path, headers); it records every request."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__((host, 0), _Handler)
        self.answer: Callable[[str, str, dict[str, str]], tuple[int, bytes, dict[str, str]]] = lambda m, p, h: (404, b"", {})
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    @property
    def host(self) -> str:
        return f"{self.server_address[0]}:{self.server_address[1]}"


class _Handler(FakeHandler):
    server: Server

    def handle_any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        headers = dict(self.headers.items())
        self.server.seen.append((self.command, self.path, headers))
        code, body, extra = self.server.answer(self.command, self.path, headers)
        self.reply(code, body, **{k.replace("-", "_"): v for k, v in extra.items()})

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = handle_any


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    """The registry (127.0.0.1) and another host (127.0.0.2) for storage or tokens."""
    pair = (Server("127.0.0.1"), Server("127.0.0.2"))
    for s in pair:
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield pair
    for s in pair:
        s.shutdown()
        s.server_close()


@pytest.fixture(autouse=True)
def _limit() -> Iterator[None]:
    yield
    set_document_limit(DEFAULT_MAX_DOCUMENT)


def registry_serving(blobs: dict[str, bytes], manifest: bytes, auth: Callable[[dict[str, str]], dict[str, str] | None],
                     redirect: Callable[[str], str] | None = None) -> Callable[..., tuple[int, bytes, dict[str, str]]]:
    """A registry's answers: `auth(headers)` gives a challenge to answer 401 with, or None; blobs may redirect."""
    def answer(method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        challenge = auth(headers)
        if challenge is not None:
            return 401, b"", challenge
        name = path.split("?")[0].rsplit("/", 1)[-1]
        if "/manifests/" in path:
            return 200, manifest, {"Content-Type": MT_MANIFEST}
        if "/blobs/" in path and name in blobs:
            if redirect is not None:
                return 307, b"", {"Location": redirect(name)}
            return 200, blobs[name], {}
        return 404, b"", {}
    return answer


def no_auth(headers: dict[str, str]) -> dict[str, str] | None:
    return None


def client(reg: Server, **kw: Any) -> RegistryClient:
    return RegistryClient(reg.host, insecure=True, retries=0, backoff=0.0, timeout=5, **kw)


def pull(reg: Server, tmp_path: Path, **kw: Any) -> Descriptor:
    with client(reg, **kw) as c:
        return pull_layout(c, parse_reference(f"{reg.host}/x/y:1"), tmp_path / "out")


# -- blob redirects ---------------------------------------------------------------------------------------


def test_blob_redirect_to_another_host_goes_without_credentials(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, store = servers
    secret = "Basic " + base64.b64encode(b"user:pw").decode()
    blobs = {digest(CONFIG): CONFIG}
    reg.answer = registry_serving(blobs, manifest_of(), lambda h: None if h.get("Authorization") == secret
                                  else {"WWW-Authenticate": 'Basic realm="r"'},
                                  redirect=lambda d: f"http://{store.host}/s3/{d}?X-Amz-Signature=abc")
    store.answer = lambda m, p, h: (200, blobs[p.split("?")[0].rsplit("/", 1)[-1]], {})
    desc = pull(reg, tmp_path, credentials=("user", "pw"))
    assert desc.digest == digest(manifest_of())
    assert [p for _, p, _ in store.seen] == [f"/s3/{digest(CONFIG)}?X-Amz-Signature=abc"]
    assert all("Authorization" not in h for _, _, h in store.seen)
    assert any(h.get("Authorization") == secret for _, _, h in reg.seen)


def test_redirect_on_the_same_registry_keeps_credentials(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, _ = servers
    blobs = {digest(CONFIG): CONFIG}
    inner = registry_serving(blobs, manifest_of(), lambda h: None if h.get("Authorization") else
                             {"WWW-Authenticate": 'Basic realm="r"'}, redirect=lambda d: f"/mirror/{d}")

    def answer(method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        if path.startswith("/mirror/"):
            return (200, CONFIG, {}) if headers.get("Authorization") else (401, b"", {})
        return inner(method, path, headers)

    reg.answer = answer
    pull(reg, tmp_path, credentials=("user", "pw"))


def test_damaged_blob_from_storage_is_refused(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, store = servers
    reg.answer = registry_serving({digest(CONFIG): CONFIG}, manifest_of(), no_auth,
                                  redirect=lambda d: f"http://{store.host}/b/{d}")
    store.answer = lambda m, p, h: (200, CONFIG[:-1] + b" ", {})
    with pytest.raises(VerifyError, match="does not match its digest"):
        pull(reg, tmp_path)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("location", "words"), [
    ("file:///etc/passwd", "'file'"),
    ("ftp://127.0.0.2/blob", "'ftp'"),
    ("http://user:pw@127.0.0.2/blob", "credentials inside the URL"),
])
def test_redirect_to_another_scheme_is_refused(servers: tuple[Server, Server], tmp_path: Path, location: str, words: str) -> None:
    reg, _ = servers
    reg.answer = registry_serving({digest(CONFIG): CONFIG}, manifest_of(), no_auth, redirect=lambda d: location)
    with pytest.raises(RegistryError, match="refusing the blob redirect") as info:
        pull(reg, tmp_path)
    assert words in info.value.why and info.value.fix


def test_redirect_loop_stops_after_five_hops(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, store = servers
    reg.answer = registry_serving({digest(CONFIG): CONFIG}, manifest_of(), no_auth,
                                  redirect=lambda d: f"http://{store.host}/loop")
    store.answer = lambda m, p, h: (302, b"", {"Location": "/loop"})
    with pytest.raises(RegistryError, match="redirected more than 5 times"):
        pull(reg, tmp_path)
    assert len(store.seen) == 5


def test_redirect_of_a_manifest_is_an_error_that_says_so(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, _ = servers
    reg.answer = lambda m, p, h: (301, b"", {"Location": "https://elsewhere.example/v2/x/y/manifests/1"})
    with pytest.raises(RegistryError, match="answered 301") as info:
        pull(reg, tmp_path)
    assert "blob downloads only" in info.value.fix


def test_a_blob_HEAD_follows_the_redirect_too(servers: tuple[Server, Server]) -> None:
    reg, store = servers
    reg.answer = registry_serving({digest(CONFIG): CONFIG}, manifest_of(), no_auth,
                                  redirect=lambda d: f"http://{store.host}/b/{d}")
    store.answer = lambda m, p, h: (200, CONFIG, {})
    with client(reg) as c:
        assert c.blob_exists("x/y", digest(CONFIG))
    assert [m for m, _, _ in store.seen] == ["HEAD"]


# -- token realms and tokens ----------------------------------------------------------------------------


def bearer(realm: str, good: Callable[[str], bool]) -> Callable[[dict[str, str]], dict[str, str] | None]:
    def auth(headers: dict[str, str]) -> dict[str, str] | None:
        if good(headers.get("Authorization", "").removeprefix("Bearer ")):
            return None
        return {"WWW-Authenticate": f'Bearer realm="{realm}",service="fake",scope="repository:x/y:pull"'}
    return auth


def test_file_realm_is_never_read(servers: tuple[Server, Server], tmp_path: Path) -> None:
    """The attack of issue 33: a realm naming a local file made hermetic send its `token` field as a bearer token."""
    reg, _ = servers
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"token": "LOCAL-FILE-CONTENT"}))
    reg.answer = registry_serving({}, manifest_of(), bearer(f"file://{local}#", lambda t: t == "LOCAL-FILE-CONTENT"))
    with pytest.raises(RegistryError, match="refusing the token service") as info:
        pull(reg, tmp_path)
    assert "'file'" in info.value.why
    assert all("LOCAL-FILE-CONTENT" not in h.get("Authorization", "") for _, _, h in reg.seen)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("realm", "why"), [
    ("ftp://127.0.0.2/token", "'ftp'"),
    ("data:application/json,{}", "'data'"),
    ("http://192.0.2.1/token", "another machine"),
    ("https://user:pw@127.0.0.2/token", "credentials inside the URL"),
    ("", "without a realm"),
])
def test_unsafe_realms_are_refused_before_anything_is_sent(
    servers: tuple[Server, Server], tmp_path: Path, realm: str, why: str
) -> None:
    reg, other = servers
    reg.answer = registry_serving({}, manifest_of(), bearer(realm, lambda t: False))
    with pytest.raises(RegistryError) as info:
        pull(reg, tmp_path, credentials=("user", "pw"))
    assert why in info.value.what + info.value.why and info.value.fix
    assert other.seen == []


def test_token_service_redirect_is_not_followed(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, tokens = servers
    reg.answer = registry_serving({}, manifest_of(), bearer(f"http://{tokens.host}/token", lambda t: False))
    tokens.answer = lambda m, p, h: (307, b"", {"Location": f"http://{reg.host}/steal"})
    with pytest.raises(RegistryError, match="answered 307") as info:
        pull(reg, tmp_path, credentials=("user", "pw"))
    assert "does not follow redirects" in info.value.why
    assert not any(p.startswith("/steal") for _, p, _ in reg.seen)


def test_anonymous_token_then_a_fresh_one_when_it_expires(servers: tuple[Server, Server], tmp_path: Path) -> None:
    """No credentials: the token request carries no Authorization. A token the registry stops accepting
    (expired early) is dropped and fetched again, once."""
    reg, tokens = servers
    issued: list[str] = []
    uses: dict[str, int] = {}

    def good(token: str) -> bool:
        uses[token] = uses.get(token, 0) + 1
        return token in issued and uses[token] <= 1  # each token is good for one request

    def token_answer(method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        issued.append(f"tok{len(issued)}")
        return 200, json.dumps({"access_token": issued[-1], "expires_in": 300}).encode(), {}

    blobs = {digest(CONFIG): CONFIG}
    reg.answer = registry_serving(blobs, manifest_of(), bearer(f"http://{tokens.host}/token", good))
    tokens.answer = token_answer
    pull(reg, tmp_path)
    assert len(issued) >= 2
    assert all("Authorization" not in h for _, _, h in tokens.seen)
    assert all("service=fake" in p and "scope=repository%3Ax%2Fy%3Apull" in p for _, p, _ in tokens.seen)


def test_unusable_tokens_are_refused(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, tokens = servers
    reg.answer = registry_serving({}, manifest_of(), bearer(f"http://{tokens.host}/token", lambda t: False))
    for body in (b"not json", b"[1]", b'{"token": 5}', json.dumps({"token": "a\r\nX-Injected: 1"}).encode(),
                 b'{"token": "' + b"[" * 10 + b'"}'):
        tokens.answer = lambda m, p, h, body=body: (200, body, {})
        with pytest.raises(RegistryError, match="token service"):
            pull(reg, tmp_path)


def small_layout(path: Path) -> Layout:
    layout = Layout(path)
    layout.init()
    layer = layout.put_bytes(LAYER)
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": layout.put_bytes(CONFIG), "size": len(CONFIG)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": len(LAYER)}],
    })
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest))])
    return layout


def test_push_and_mount_ask_for_their_scopes(servers: tuple[Server, Server], tmp_path: Path) -> None:
    """One token for pull,push on the target and pull on the mount source, per the token spec's scopes."""
    reg, tokens = servers
    asked: list[list[str]] = []
    mounted: set[str] = set()

    def token_answer(method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        asked.append(urllib.parse.parse_qs(path.partition("?")[2]).get("scope", []))
        return 200, b'{"token": "t"}', {}

    def answer(method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        if headers.get("Authorization") != "Bearer t":
            return 401, b"", {"WWW-Authenticate": f'Bearer realm="http://{tokens.host}/token",service="fake"'}
        query = urllib.parse.parse_qs(path.partition("?")[2])
        if method == "POST" and "mount" in query:
            mounted.add(query["mount"][0])
            return 201, b"", {}
        if method == "PUT":
            return 201, b"", {}
        name = path.split("?")[0].rsplit("/", 1)[-1]
        present = method == "HEAD" and (name in mounted or "/manifests/" in path)
        return (200, b"", {}) if present else (404, b"", {})

    reg.answer, tokens.answer = answer, token_answer
    with client(reg) as c:
        push_layout(c, small_layout(tmp_path / "l"), parse_reference(f"{reg.host}/dst/img:1"), mount_from=["src/img"])
        assert len(c.stats.mounted) == 2
    assert asked == [["repository:dst/img:pull,push", "repository:src/img:pull"]]


# -- size caps ---------------------------------------------------------------------------------------------


def test_manifest_over_the_cap_is_refused_unless_the_cap_is_raised(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, _ = servers
    big = canonical_json({"schemaVersion": 2, "mediaType": MT_MANIFEST, "annotations": {"x": "y" * (5 << 20)}})
    reg.answer = lambda m, p, h: (200, big, {"Content-Type": MT_MANIFEST})
    with client(reg) as c, pytest.raises(VerifyError, match="larger than hermetic reads") as info:
        c.get_manifest("x/y", "1")
    assert "--max-manifest-size" in info.value.fix
    set_document_limit(8 << 20)
    with client(reg) as c:
        assert c.get_manifest("x/y", "1")[1] == big


def test_manifest_over_the_cap_without_a_length_is_refused(servers: tuple[Server, Server]) -> None:
    """A body sent chunked has no Content-Length to refuse it by: reading stops at the cap."""
    reg, _ = servers

    class Chunked(_Handler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"x" * (1 << 20)
            for _ in range(6):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")

    reg.RequestHandlerClass = Chunked
    with client(reg) as c, pytest.raises(VerifyError, match="larger than hermetic reads"):
        c.get_manifest("x/y", "1")


def test_config_over_the_cap_is_refused_before_download(servers: tuple[Server, Server], tmp_path: Path) -> None:
    reg, _ = servers
    reg.answer = registry_serving({}, manifest_of(config_size=64 << 20), no_auth)
    with pytest.raises(VerifyError, match="larger than hermetic reads"):
        pull(reg, tmp_path)
    assert not any("/blobs/" in p for _, p, _ in reg.seen)


def test_head_of_a_large_blob_is_no_answer_over_the_cap(servers: tuple[Server, Server]) -> None:
    """A HEAD's Content-Length is the blob's size, not a body to refuse: a 1 GiB layer exists."""
    reg, store = servers

    class Head(_Handler):
        def do_HEAD(self) -> None:
            self.server.seen.append((self.command, self.path, dict(self.headers.items())))
            if self.path.startswith("/v2/"):
                self.send_response(307)
                self.send_header("Location", f"http://{store.host}/b")
                self.send_header("Content-Length", "0")
            else:
                self.send_response(200)
                self.send_header("Content-Length", str(1 << 30))
            self.end_headers()

    reg.RequestHandlerClass = store.RequestHandlerClass = Head
    with client(reg) as c:
        assert c.blob_exists("x/y", "sha256:" + "a" * 64)
    assert [m for m, _, _ in store.seen] == ["HEAD"]
