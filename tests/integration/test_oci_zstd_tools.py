"""zstd images of the tiny recipe's `full` build: the real registry, and which of Debian 12's tools read them.

Debian 12 (bookworm) ships buildah 1.28 and skopeo 1.9 (containers/image, which
decodes zstd layers) and umoci 0.4.7, which refuses any layer media type but
tar and tar+gzip. The umoci test asserts that refusal, so an upgrade that
reads zstd fails it: then zstd may become the default (README, OCI section).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_oci_registry import buildah_copy_from, buildah_store, prefix_of, run, tree_digest_of

from hermetic.model.record import BuildRecord, load_build_record
from hermetic.oci.image import ImageResult, spec_from_record, write_image
from hermetic.oci.layer import MEDIA_TYPE_GZIP, MEDIA_TYPE_ZSTD
from hermetic.oci.layout import Layout
from hermetic.oci.registry import RegistryClient
from hermetic.oci.transfer import pull_layout, push_layout
from hermetic.oci.types import Descriptor, parse_reference
from hermetic.oci.unpack import unpack_layout, verify_tree

Registry = Any  # the fixture class in conftest.py


TAG = "tiny-full-1.0.0-linux-amd64"  # the layout's ref name


@pytest.fixture(scope="session")
def record(tiny_full_install: Path) -> BuildRecord:
    return load_build_record(tiny_full_install)


@pytest.fixture(scope="session")
def zstd_image(tiny_full_install: Path, tmp_path_factory: pytest.TempPathFactory) -> ImageResult:
    return write_image(
        spec_from_record(tiny_full_install, arch="amd64"), tmp_path_factory.mktemp("zimg") / "zstd", "zstd"
    )


@pytest.fixture(scope="session")
def gzip_image(tiny_full_install: Path, tmp_path_factory: pytest.TempPathFactory) -> ImageResult:
    return write_image(
        spec_from_record(tiny_full_install, arch="amd64"), tmp_path_factory.mktemp("gimg") / "gzip", "gzip"
    )


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} is missing: install Debian's {tool} package (.ci/setup does)")


def manifest_of(layout_dir: Path) -> dict[str, Any]:
    layout = Layout(layout_dir)
    return layout.read_json(layout.index()[0])


def config_of(layout_dir: Path) -> dict[str, Any]:
    layout = Layout(layout_dir)
    return layout.read_json(Descriptor.from_json(manifest_of(layout_dir)["config"], str(layout_dir)))


def push(reg: Registry, image: ImageResult, ref_text: str) -> str:
    with RegistryClient(reg.host, insecure=True) as client:
        return push_layout(client, Layout(image.layout), parse_reference(ref_text), chunk_size=4 << 20).digest


def test_zstd_image_is_stable_and_shares_diff_ids_with_gzip(
    tiny_full_install: Path, zstd_image: ImageResult, gzip_image: ImageResult, tmp_path: Path
) -> None:
    again = write_image(spec_from_record(tiny_full_install, arch="amd64"), tmp_path / "elsewhere" / "z", "zstd")
    assert again.manifest.digest == zstd_image.manifest.digest and again.layer.digest == zstd_image.layer.digest
    assert zstd_image.layer.diff_id == gzip_image.layer.diff_id
    assert config_of(zstd_image.layout) == config_of(gzip_image.layout)
    assert zstd_image.manifest.digest != gzip_image.manifest.digest
    assert [d["mediaType"] for d in manifest_of(zstd_image.layout)["layers"]] == [MEDIA_TYPE_ZSTD]
    assert zstd_image.layer.size < gzip_image.layer.size


def test_push_pull_unpack_zstd_equals_install_tree(
    registry: Registry, zstd_image: ImageResult, tiny_full_install: Path, record: BuildRecord, tmp_path: Path
) -> None:
    ref = f"{registry.host}/zstd/tiny:pull"
    assert push(registry, zstd_image, ref) == zstd_image.manifest.digest
    with RegistryClient(registry.host, insecure=True) as client:
        desc = pull_layout(client, parse_reference(ref), tmp_path / "pulled")  # checks digests and diff_ids
    assert desc.digest == zstd_image.manifest.digest
    unpack_layout(Layout(tmp_path / "pulled"), tmp_path / "root")
    assert verify_tree(tmp_path / "root", tiny_full_install) == []
    assert tree_digest_of(tmp_path / "root", record) == record.tree.digest


def test_skopeo_reads_the_zstd_image(registry: Registry, zstd_image: ImageResult, tmp_path: Path) -> None:
    need("skopeo")
    ref = f"{registry.host}/zstd/tiny:skopeo"
    push(registry, zstd_image, ref)
    info = json.loads(run("skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"))
    assert info["Digest"] == zstd_image.manifest.digest
    assert info["Layers"] == [zstd_image.layer.digest]
    raw = run("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}").encode()
    assert raw == Layout(zstd_image.layout).read_blob(zstd_image.manifest)

    # a plain copy keeps every blob byte for byte
    run("skopeo", "copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{tmp_path / 'copy'}:copy")
    copied = Layout(tmp_path / "copy")
    (entry,) = copied.index()
    assert entry.digest == zstd_image.manifest.digest
    copied.verify()

    # recompressing to gzip makes skopeo decode our zstd: the tar it gets must be our diff_id
    run(
        "skopeo", "copy", "--src-tls-verify=false", "--dest-compress", "--dest-compress-format", "gzip",
        f"docker://{ref}", f"oci:{tmp_path / 'regz'}:regz",
    )  # fmt: skip
    (layer,) = manifest_of(tmp_path / "regz")["layers"]
    assert layer["mediaType"] == MEDIA_TYPE_GZIP
    tar = gzip.decompress(Layout(tmp_path / "regz").blob_path(layer["digest"]).read_bytes())
    assert "sha256:" + hashlib.sha256(tar).hexdigest() == zstd_image.layer.diff_id
    assert config_of(tmp_path / "regz")["rootfs"]["diff_ids"] == [zstd_image.layer.diff_id]


def test_buildah_copies_from_the_zstd_image(
    registry: Registry, zstd_image: ImageResult, record: BuildRecord, tmp_path: Path
) -> None:
    ref = f"{registry.host}/zstd/tiny:buildah"
    push(registry, zstd_image, ref)
    with buildah_store(tmp_path) as store:
        mnt = buildah_copy_from(store, ref, "/" + prefix_of(record), tmp_path / "ctx", "localhost/zstd-consumer")
        assert tree_digest_of(mnt, record) == record.tree.digest


def test_umoci_of_debian_12_refuses_zstd_and_reads_gzip(
    zstd_image: ImageResult, gzip_image: ImageResult, record: BuildRecord, tmp_path: Path
) -> None:
    """umoci 0.4.7 knows tar and tar+gzip layers only. If this starts failing, umoci reads zstd now:
    update the README's OCI section, and consider zstd as the default."""
    need("umoci")
    version = run("umoci", "--version").strip()
    bundle = tmp_path / "zstd-bundle"
    proc = subprocess.run(
        ["umoci", "unpack", "--image", f"{zstd_image.layout}:{TAG}", str(bundle)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode != 0, f"{version} unpacked a zstd layer: it reads zstd now (see this test's docstring)"
    assert f"blob is not correct mediatype: {MEDIA_TYPE_ZSTD}" in proc.stderr, proc.stderr
    # the same tree as gzip: umoci reads it, so the refusal is about the compression alone
    run("umoci", "unpack", "--image", f"{gzip_image.layout}:{TAG}", str(tmp_path / "gzip-bundle"))
    assert tree_digest_of(tmp_path / "gzip-bundle" / "rootfs", record) == record.tree.digest
