"""Pulling against an in-process read-only registry: platform checks, 404s told apart, disk full."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_http import FakeHandler, FakeServer
from hermetic.core.errors import EnvironmentError_, RegistryError, VerifyError
from hermetic.oci import registry as registry_mod
from hermetic.oci import unpack as unpack_mod
from hermetic.oci.layout import Layout
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import pull_layout
from hermetic.oci.types import MT_CONFIG, MT_MANIFEST, Descriptor, canonical_json, parse_reference
from hermetic.oci.unpack import unpack_layout

pytestmark = pytest.mark.unit


def tiny_image(path: Path, arch: str = "amd64", files: dict[str, bytes] | None = None) -> tuple[Layout, Descriptor]:
    """A single-platform layout: one gzip layer, config naming `arch`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted((files or {"usr/ok.txt": b"fine"}).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tar_bytes = buf.getvalue()
    layout = Layout(path)
    layout.init()
    blob = gzip.compress(tar_bytes, mtime=0)
    config = canonical_json(
        {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar_bytes).hexdigest()]}}
    )
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": layout.put_bytes(config), "size": len(config)},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layout.put_bytes(blob), "size": len(blob)}
            ],
        }
    )
    desc = Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest))
    layout.write_index([desc])
    return layout, desc


class ReadOnlyRegistry(FakeServer):
    """Serves one repository from a layout; `name_unknown` picks how a missing repository is reported."""

    def __init__(self, layout: Layout, repo: str, tags: dict[str, str], name_unknown: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.layout, self.repo, self.tags, self.name_unknown = layout, repo, tags, name_unknown
        self.blob_gets: list[str] = []


def _err(code: str) -> bytes:
    return json.dumps({"errors": [{"code": code, "message": code.lower()}]}).encode()


class _Handler(FakeHandler):
    server: ReadOnlyRegistry

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        prefix = f"/v2/{self.server.repo}/"
        if not path.startswith(prefix):
            if "/manifests/" in path or "/tags/list" in path:
                # distribution says NAME_UNKNOWN; some registries only say MANIFEST_UNKNOWN
                code = "NAME_UNKNOWN" if self.server.name_unknown else "MANIFEST_UNKNOWN"
                return self.reply(404, _err(code if "/manifests/" in path else "NAME_UNKNOWN"))
            return self.reply(404)
        rest = path[len(prefix):]
        if rest == "tags/list":
            return self.reply(200, json.dumps({"name": self.server.repo, "tags": sorted(self.server.tags)}).encode())
        kind, _, ref = rest.partition("/")
        digest = self.server.tags.get(ref, ref)
        try:
            data = self.server.layout.blob_path(digest).read_bytes()
        except Exception:
            data = None
        if data is None:
            return self.reply(404, _err("MANIFEST_UNKNOWN" if kind == "manifests" else "BLOB_UNKNOWN"))
        if kind == "blobs":
            self.server.blob_gets.append(digest)
            return self.reply(200, data)
        return self.reply(200, data, Content_Type=MT_MANIFEST, Docker_Content_Digest=digest)

    do_HEAD = do_GET


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ReadOnlyRegistry, Descriptor]]:
    layout, desc = tiny_image(tmp_path / "src")
    reg = ReadOnlyRegistry(layout, "team/llvm", {"1": desc.digest, "2": desc.digest})
    threading.Thread(target=reg.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield reg, desc
    reg.shutdown()
    reg.server_close()


def client(reg: ReadOnlyRegistry) -> RegistryClient:
    return RegistryClient(reg.host, insecure=True, retries=0, backoff=0.0)


# -- item: a single-platform image is checked against --arch ---------------------------------------


def test_single_platform_pull_refuses_another_arch(served: tuple[ReadOnlyRegistry, Descriptor], tmp_path: Path) -> None:
    reg, desc = served
    dest = tmp_path / "out"
    with client(reg) as c, pytest.raises(VerifyError) as exc:
        pull_layout(c, parse_reference(f"{reg.host}/team/llvm:1"), dest, arch="arm64")
    text = exc.value.render()
    assert "amd64" in text and "arm64" in text
    assert exc.value.exit_code == 8
    assert not dest.exists() and [p for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    layers = [d.digest for d in reg.layout.children(desc)[1:]]
    assert not set(layers) & set(reg.blob_gets), "layers were downloaded before the platform was checked"


def test_single_platform_pull_with_its_own_arch_or_none(served: tuple[ReadOnlyRegistry, Descriptor], tmp_path: Path) -> None:
    reg, desc = served
    for arch in ("amd64", None):
        with client(reg) as c:
            got = pull_layout(c, parse_reference(f"{reg.host}/team/llvm:1"), tmp_path / f"out-{arch}", arch=arch)
        assert got.digest == desc.digest


def test_unpack_of_a_single_platform_layout_checks_arch(tmp_path: Path) -> None:
    layout, _ = tiny_image(tmp_path / "l", arch="amd64")
    with pytest.raises(VerifyError, match="arm64"):
        unpack_layout(layout, tmp_path / "root", arch="arm64")
    assert not (tmp_path / "root").exists()
    unpack_layout(layout, tmp_path / "root2")  # no --arch: whatever the image is
    assert (tmp_path / "root2/usr/ok.txt").read_bytes() == b"fine"


# -- item: a 404 says whether the repository or the tag is missing --------------------------------


@pytest.mark.parametrize("name_unknown", [True, False], ids=["NAME_UNKNOWN", "MANIFEST_UNKNOWN-only"])
def test_missing_repository_is_told_apart(tmp_path: Path, name_unknown: bool) -> None:
    layout, desc = tiny_image(tmp_path / "src")
    reg = ReadOnlyRegistry(layout, "team/llvm", {"1": desc.digest}, name_unknown=name_unknown)
    threading.Thread(target=reg.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with client(reg) as c, pytest.raises(RegistryError) as exc:
            pull_layout(c, parse_reference(f"{reg.host}/team/llmv:1"), tmp_path / "out")
    finally:
        reg.shutdown()
        reg.server_close()
    assert "repository" in exc.value.what and "does not exist" in exc.value.what and "team/llmv" in exc.value.what
    assert exc.value.fix and "hermetic push" in exc.value.fix
    assert exc.value.exit_code == 7


def test_missing_tag_is_told_apart_and_lists_tags(served: tuple[ReadOnlyRegistry, Descriptor], tmp_path: Path) -> None:
    reg, _ = served
    with client(reg) as c, pytest.raises(RegistryError) as exc:
        pull_layout(c, parse_reference(f"{reg.host}/team/llvm:3"), tmp_path / "out")
    assert "no tag '3'" in exc.value.what
    assert "1, 2" in exc.value.why
    assert exc.value.fix and f"{reg.host}/team/llvm:1" in exc.value.fix
    assert not (tmp_path / "out").exists()


def test_missing_digest_is_told_apart(served: tuple[ReadOnlyRegistry, Descriptor], tmp_path: Path) -> None:
    reg, _ = served
    missing = "sha256:" + "0" * 64
    with client(reg) as c, pytest.raises(RegistryError) as exc:
        pull_layout(c, parse_reference(f"{reg.host}/team/llvm@{missing}"), tmp_path / "out")
    assert missing in exc.value.what and exc.value.fix


# -- disk full ------------------------------------------------------------------------------------


def test_disk_full_during_blob_download_names_the_path(
    served: tuple[ReadOnlyRegistry, Descriptor], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, _ = served
    real_open = open

    def full_open(path, mode="r", *a, **kw):  # type: ignore[no-untyped-def]
        f = real_open(path, mode, *a, **kw)
        if "w" in mode and str(path).endswith(".part"):
            f.close()
            raise OSError(errno.ENOSPC, "No space left on device")
        return f

    monkeypatch.setattr(registry_mod, "open", full_open, raising=False)
    with client(reg) as c, pytest.raises(EnvironmentError_) as exc:
        pull_layout(c, parse_reference(f"{reg.host}/team/llvm:1"), tmp_path / "out")
    assert "no space left" in exc.value.what and str(tmp_path / ".out.") in exc.value.what
    assert list(tmp_path.iterdir()) == [tmp_path / "src"]


def test_disk_full_during_unpack_names_the_path_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout, _ = tiny_image(tmp_path / "l")
    area = tmp_path / "area"
    area.mkdir()

    def full_disk(src, dst, length=0):  # type: ignore[no-untyped-def]
        dst.write(b"par")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(unpack_mod.shutil, "copyfileobj", full_disk)
    with pytest.raises(EnvironmentError_) as exc:
        unpack_layout(layout, area / "root")
    assert str(area / "root" / "usr" / "ok.txt") in exc.value.what
    assert list(area.iterdir()) == []


def test_missing_blob_has_a_fix_line(served: tuple[ReadOnlyRegistry, Descriptor], tmp_path: Path) -> None:
    reg, desc = served
    reg.layout.blob_path(reg.layout.children(desc)[1].digest).unlink()
    with client(reg) as c, pytest.raises(RegistryError) as exc:
        pull_layout(c, parse_reference(f"{reg.host}/team/llvm:1"), tmp_path / "out")
    assert "404" in exc.value.what and "push the image again" in exc.value.fix
    assert not (tmp_path / "out").exists()
