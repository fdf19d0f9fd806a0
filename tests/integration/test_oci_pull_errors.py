"""`hermetic pull` against a real docker-registry: a single-platform image and --arch, 404s told apart."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic
from hermetic.oci.layout import Layout
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import push_layout
from hermetic.oci.types import MT_CONFIG, MT_MANIFEST, Descriptor, canonical_json, parse_reference

Registry = Any  # the fixture class in conftest.py



def tiny_amd64_image(path: Path) -> Layout:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("usr/ok.txt")
        info.size, info.mode = 4, 0o644
        tar.addfile(info, io.BytesIO(b"fine"))
    tar_bytes = buf.getvalue()
    layout = Layout(path)
    layout.init()
    blob = gzip.compress(tar_bytes, mtime=0)
    config = canonical_json(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar_bytes).hexdigest()]}}
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
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest))])
    return layout


@pytest.fixture
def pushed(registry: Registry, tmp_path: Path) -> str:
    ref = parse_reference(f"{registry.host}/integrity/single:1")
    with RegistryClient(registry.host, insecure=True) as client:
        push_layout(client, tiny_amd64_image(tmp_path / "img"), ref)
    return str(ref)


def test_pull_of_a_single_platform_image_honours_arch(pushed: str, tmp_path: Path) -> None:
    area = tmp_path / "area"
    area.mkdir()
    proc = hermetic("pull", pushed, "--insecure", "--arch", "arm64", "--unpack", str(area / "root"), check=False)
    assert proc.returncode == 8, proc.stderr
    assert "amd64" in proc.stderr and "arm64" in proc.stderr and "Traceback" not in proc.stderr
    assert list(area.iterdir()) == []
    ok = hermetic("pull", pushed, "--insecure", "--arch", "amd64", "--unpack", str(area / "root"))
    assert ok.returncode == 0 and (area / "root/usr/ok.txt").read_bytes() == b"fine"


def test_pull_of_a_missing_tag_and_a_missing_repository(registry: Registry, pushed: str, tmp_path: Path) -> None:
    tag = hermetic("pull", pushed.replace(":1", ":nope"), "--insecure", "--layout", str(tmp_path / "a"), check=False)
    assert tag.returncode == 7, tag.stderr
    assert "has no tag 'nope'" in tag.stderr and "1" in tag.stderr and "  fix: " in tag.stderr
    repo = hermetic("pull", f"{registry.host}/integrity/absent:1", "--insecure", "--layout", str(tmp_path / "b"), check=False)
    assert repo.returncode == 7, repo.stderr
    assert "repository" in repo.stderr and "does not exist" in repo.stderr and "  fix: " in repo.stderr
    assert "Traceback" not in tag.stderr + repo.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
