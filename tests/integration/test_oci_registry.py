"""Push, pull, skopeo, buildah and failure injection against a real docker-registry, with the tiny recipe's `full`
image (its 1.5 MB data file makes a layer uploaded in several chunks, which the mid-push failures cut)."""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import shutil
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.buildah import buildah_copy_from, buildah_store, run
from hermetic.cli import oci as oci_cli
from hermetic.cli.common import common_parsers
from hermetic.core.errors import RegistryError, VerifyError
from hermetic.model.record import BuildRecord, load_build_record, scan_tree, tree_digest
from hermetic.model.settings import Settings
from hermetic.oci.image import spec_from_record, write_image
from hermetic.oci.layout import Layout
from hermetic.oci.registry import Progress, RegistryClient
from hermetic.oci.transfer import pull_layout, push_layout
from hermetic.oci.types import parse_reference
from hermetic.oci.unpack import unpack_layout, verify_tree

Registry = Any  # the fixture class in conftest.py


@pytest.fixture(scope="session")
def record(tiny_full_install: Path) -> BuildRecord:
    return load_build_record(tiny_full_install)


@pytest.fixture(scope="session")
def image(tiny_full_install: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_image(
        spec_from_record(tiny_full_install, arch="amd64"), tmp_path_factory.mktemp("img") / "layout"
    ).layout


def prefix_of(record: BuildRecord) -> str:
    return record.prefix.strip("/")


_CLIENTS: list[RegistryClient] = []


def tree_digest_of(root: Path, record: BuildRecord) -> str:
    """The digest of the tree at root, taken the way the record took it (from the rootfs or the prefix)."""
    prefix = prefix_of(record)
    files = [f.path for f in record.tree.files]
    if not any(f == prefix or f.startswith(prefix + "/") for f in files):
        return tree_digest(scan_tree(root / prefix))
    keep = {"/".join(prefix.split("/")[:i]) for i in range(1, prefix.count("/") + 2)}
    return tree_digest(e for e in scan_tree(root) if e.path in keep or e.path.startswith(prefix + "/"))


def client_for(reg: Registry | str, **kw: Any) -> RegistryClient:
    client = RegistryClient(reg if isinstance(reg, str) else reg.host, insecure=True, **kw)
    _CLIENTS.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def all_blobs_present(reg: Registry, repo: str, tag: str) -> bool:
    status, body, _ = reg.get(f"/v2/{repo}/manifests/{tag}", accept="application/vnd.oci.image.manifest.v1+json")
    assert status == 200
    manifest = json.loads(body)
    return all(reg.get(f"/v2/{repo}/blobs/{d['digest']}")[0] == 200 for d in [manifest["config"], *manifest["layers"]])


def test_image_digest_is_stable_across_directories(tiny_full_install: Path, image: Path, tmp_path: Path) -> None:
    again = write_image(spec_from_record(tiny_full_install, arch="amd64"), tmp_path / "elsewhere" / "x")
    assert Layout(image).index()[0].digest == again.manifest.digest


def test_push_then_skopeo_inspect_and_copy(registry: Registry, image: Path, tmp_path: Path) -> None:
    ref = parse_reference(f"{registry.host}/tiny-full-1.0.0:1.0.0")
    client = client_for(registry)
    result = push_layout(client, Layout(image), ref, chunk_size=1 << 20)
    local = Layout(image).index()[0]
    assert result.digest == local.digest
    assert client.stats.uploaded and not client.stats.skipped

    info = json.loads(run("skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"))
    assert info["Digest"] == local.digest
    assert info["Labels"]["io.hermetic.variant"] == "full"
    raw = run("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}").encode()
    assert raw == Layout(image).read_blob(local)

    out = tmp_path / "skopeo-oci"
    run("skopeo", "copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{out}:copy")
    copied = Layout(out)
    (entry,) = copied.index()
    assert entry.digest == local.digest
    copied.verify()
    for blob in Layout(image).children(local):
        assert copied.blob_path(blob.digest).read_bytes() == Layout(image).blob_path(blob.digest).read_bytes()

    again = client_for(registry)
    push_layout(again, Layout(image), ref)
    assert not again.stats.uploaded and len(again.stats.skipped) == 2


def test_cross_repository_mount(registry: Registry, image: Path) -> None:
    push_layout(client_for(registry), Layout(image), parse_reference(f"{registry.host}/mount/src:1"))
    client = client_for(registry)
    push_layout(client, Layout(image), parse_reference(f"{registry.host}/mount/dst:1"), mount_from=["mount/src"])
    assert len(client.stats.mounted) == 2 and not client.stats.uploaded
    assert all_blobs_present(registry, "mount/dst", "1")


def test_pull_unpack_equals_install_tree(
    registry: Registry, image: Path, tiny_full_install: Path, record: BuildRecord, tmp_path: Path
) -> None:
    ref = parse_reference(f"{registry.host}/pull/llvm:1")
    push_layout(client_for(registry), Layout(image), ref, chunk_size=512 << 10)
    layout_dir = tmp_path / "pulled"
    desc = pull_layout(client_for(registry), ref, layout_dir)
    assert desc.digest == Layout(image).index()[0].digest
    dest = tmp_path / "root"
    unpack_layout(Layout(layout_dir), dest)
    assert verify_tree(dest, tiny_full_install) == []
    assert tree_digest_of(dest, record) == record.tree.digest


def test_cli_pull_unpack_and_verify_tree(
    registry: Registry, image: Path, tiny_full_install: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    oci_cli.register(parser.add_subparsers(), common_parsers())
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True)
    ref = f"{registry.host}/cli/llvm:tag"
    for argv in (
        ["push", str(image), ref, "--insecure", "--chunk-size", "1M"],
        ["pull", ref, "--unpack", str(tmp_path / "u"), "--insecure"],
        ["verify-tree", str(tmp_path / "u"), "--record", str(tiny_full_install)],
    ):
        args = parser.parse_args(argv)
        assert args.func(args, settings) == 0
    assert not list(tmp_path.glob(".u.*"))
    (tmp_path / "u" / prefix_of(load_build_record(tiny_full_install)) / "extra").write_text("x")
    args = parser.parse_args(["verify-tree", str(tmp_path / "u"), "--record", str(tiny_full_install)])
    with pytest.raises(VerifyError, match="differs"):
        args.func(args, settings)


def test_buildah_copy_from_registry_image(registry: Registry, image: Path, record: BuildRecord, tmp_path: Path) -> None:
    ref = f"{registry.host}/tiny-full-1.0.0:buildah"
    push_layout(client_for(registry), Layout(image), parse_reference(ref))
    with buildah_store(tmp_path) as store:
        mnt = buildah_copy_from(store, ref, "/" + prefix_of(record), tmp_path / "ctx", "localhost/consumer")
        assert tree_digest_of(mnt, record) == record.tree.digest


class KillDuringUpload(Progress):
    """Kills the registry once the first chunk of a large blob is in; optionally restarts it."""

    threshold = 0

    def __init__(self, reg: Registry, restart: bool) -> None:
        super().__init__(enabled=True)
        self.reg, self.restart, self.fired = reg, restart, False

    def update(self, done: int) -> None:
        if not self.fired and 0 < done < self._total and self._label.startswith("push"):
            self.fired = True
            self.reg.restart() if self.restart else self.reg.kill()

    def finish(self) -> None:
        pass


def test_registry_killed_mid_push_then_rerun(fresh_registry: Registry, image: Path, tmp_path: Path) -> None:
    reg = fresh_registry
    ref = parse_reference(f"{reg.host}/killed/llvm:1")
    progress = KillDuringUpload(reg, restart=False)
    client = client_for(reg, retries=2, backoff=0.05, progress=progress)
    with pytest.raises(RegistryError):
        push_layout(client, Layout(image), ref, chunk_size=256 << 10)
    assert progress.fired
    reg.start()
    # the tag was never written, so nothing points at missing blobs
    assert reg.tags("killed/llvm") == []
    assert reg.get("/v2/killed/llvm/manifests/1")[0] == 404
    rerun = client_for(reg)
    push_layout(rerun, Layout(image), ref, chunk_size=256 << 10)
    assert reg.tags("killed/llvm") == ["1"]
    assert all_blobs_present(reg, "killed/llvm", "1")
    pull_layout(client_for(reg), ref, tmp_path / "back")
    Layout(tmp_path / "back").verify()


def test_registry_restarted_mid_push_is_retried(fresh_registry: Registry, image: Path) -> None:
    reg = fresh_registry
    ref = parse_reference(f"{reg.host}/restarted/llvm:1")
    progress = KillDuringUpload(reg, restart=True)
    client = client_for(reg, retries=6, backoff=0.1, progress=progress)
    result = push_layout(client, Layout(image), ref, chunk_size=256 << 10)
    assert progress.fired and client.stats.retries > 0
    assert result.digest == Layout(image).index()[0].digest
    assert all_blobs_present(reg, "restarted/llvm", "1")


class FlakyProxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Forwards to the registry; answers 503 to every 4th request and drops every 7th connection."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.count = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FlakyProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        with self.server.lock:
            self.server.count += 1
            n = self.server.count
        if n % 7 == 0:
            self.close_connection = True
            self.connection.close()
            return
        if n % 4 == 0:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        conn = http.client.HTTPConnection(self.server.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _forward


@pytest.fixture
def flaky(registry: Registry) -> Iterator[FlakyProxy]:
    proxy = FlakyProxy(registry.host)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield proxy
    proxy.shutdown()
    proxy.server_close()


def test_push_and_pull_through_503s_and_dropped_connections(
    flaky: FlakyProxy, registry: Registry, image: Path, tmp_path: Path
) -> None:
    ref = parse_reference(f"{flaky.host}/flaky/llvm:1")
    client = client_for(flaky.host, retries=8, backoff=0.01)
    push_layout(client, Layout(image), ref, chunk_size=512 << 10)
    assert client.stats.retries > 0
    assert all_blobs_present(registry, "flaky/llvm", "1")
    desc = pull_layout(client_for(flaky.host, retries=8, backoff=0.01), ref, tmp_path / "pulled")
    assert desc.digest == Layout(image).index()[0].digest


def test_tampered_layout_is_refused_before_upload(registry: Registry, image: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(image, bad)
    layout = Layout(bad)
    layer = layout.children(layout.index()[0])[1]
    path = layout.blob_path(layer.digest)
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(VerifyError, match="does not match its digest"):
        push_layout(client_for(registry), layout, parse_reference(f"{registry.host}/tampered/llvm:1"))
    assert registry.tags("tampered/llvm") == []
    assert registry.get(f"/v2/tampered/llvm/blobs/{layer.digest}")[0] == 404
