"""zstd layers: deterministic bytes, the same diff_ids as gzip, unpacking, damaged layers refused."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from test_oci import OK, PREFIX, canonical_json, make_record, tar_of

from hermetic.cli import oci as oci_cli
from hermetic.cli.common import common_parsers
from hermetic.core.errors import UsageError, VerifyError
from hermetic.model.settings import Settings
from hermetic.oci.image import spec_from_record, write_image
from hermetic.oci.layer import (
    MEDIA_TYPE_GZIP,
    MEDIA_TYPE_ZSTD,
    ZSTD_LEVEL,
    check_compression,
    layer_diff_id,
    zstd_compressor,
)
from hermetic.oci.layout import Layout
from hermetic.oci.types import MT_CONFIG, MT_MANIFEST, Descriptor
from hermetic.oci.unpack import unpack_layout, verify_tree

pytestmark = pytest.mark.unit

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def test_same_tree_twice_gives_the_same_zstd_blob(tmp_path: Path) -> None:
    a = write_image(spec_from_record(make_record(tmp_path / "a"), arch="amd64"), tmp_path / "a" / "img", "zstd")
    b = write_image(
        spec_from_record(make_record(tmp_path / "else/where"), arch="amd64"), tmp_path / "x" / "img", "zstd"
    )
    assert a.layer.media_type == MEDIA_TYPE_ZSTD
    assert a.layer.digest == b.layer.digest and a.manifest.digest == b.manifest.digest
    blob = Layout(a.layout).blob_path(a.layer.digest).read_bytes()
    assert Layout(b.layout).blob_path(b.layer.digest).read_bytes() == blob
    assert "sha256:" + hashlib.sha256(blob).hexdigest() == a.layer.digest and len(blob) == a.layer.size


def test_zstd_frame_parameters_are_the_fixed_ones(tmp_path: Path) -> None:
    result = write_image(spec_from_record(make_record(tmp_path), arch="amd64"), tmp_path / "img", "zstd")
    blob = Layout(result.layout).blob_path(result.layer.digest).read_bytes()
    assert blob[:4] == ZSTD_MAGIC
    frame = zstandard.get_frame_parameters(blob)
    assert frame.content_size == zstandard.CONTENTSIZE_UNKNOWN  # streamed: never written
    assert frame.has_checksum
    assert frame.dict_id == 0
    # one frame: decompressing exactly one frame uses the whole blob
    dobj = zstandard.ZstdDecompressor().decompressobj()
    tar = dobj.decompress(blob)
    assert dobj.eof and dobj.unused_data == b""
    assert "sha256:" + hashlib.sha256(tar).hexdigest() == result.layer.diff_id
    # how the tar is cut into writes changes nothing (tarfile writes 10 KiB records)
    for step in (512, 10240, 1 << 20):
        assert _streamed(tar, step) == blob
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        assert t.getnames()[:3] == ["usr", "usr/lib64", PREFIX]


def _streamed(tar: bytes, step: int) -> bytes:
    out = io.BytesIO()
    with zstd_compressor().stream_writer(out, closefd=False) as w:
        for i in range(0, len(tar), step):
            w.write(tar[i : i + step])
    return out.getvalue()


def test_gzip_and_zstd_images_share_diff_ids_and_rootfs(tmp_path: Path) -> None:
    spec = spec_from_record(make_record(tmp_path), arch="amd64")
    gz = write_image(spec, tmp_path / "gz", "gzip")
    zs = write_image(spec, tmp_path / "zs", "zstd")
    assert gz.layer.diff_id == zs.layer.diff_id and gz.layer.tar_size == zs.layer.tar_size
    assert gz.layer.digest != zs.layer.digest and gz.manifest.digest != zs.manifest.digest
    assert (gz.layer.media_type, zs.layer.media_type) == (MEDIA_TYPE_GZIP, MEDIA_TYPE_ZSTD)
    configs = []
    for r in (gz, zs):
        layout = Layout(r.layout)
        manifest = layout.read_json(layout.index()[0])
        assert [d["mediaType"] for d in manifest["layers"]] == [r.layer.media_type]
        configs.append(layout.read_json(Descriptor.from_json(manifest["config"], "m")))
    assert configs[0]["rootfs"] == configs[1]["rootfs"] == {"type": "layers", "diff_ids": [gz.layer.diff_id]}
    assert configs[0] == configs[1]  # the config describes the tree, not its compression


def test_unpack_of_a_zstd_image_gives_the_tree_back(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    result = write_image(spec_from_record(rec, arch="amd64"), tmp_path / "img", "zstd")
    Layout(result.layout).verify()
    blob = Layout(result.layout).blob_path(result.layer.digest)
    assert layer_diff_id(blob, MEDIA_TYPE_ZSTD) == result.layer.diff_id
    unpack_layout(Layout(result.layout), tmp_path / "root", arch="amd64")
    assert verify_tree(tmp_path / "root", rec) == []


def zstd_layout(path: Path, blob: bytes, diff_id: str) -> Layout:
    """A layout whose one zstd layer is `blob`, digests computed over it as a careless publisher would."""
    layout = Layout(path)
    layout.init()
    config = canonical_json(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    )
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": layout.put_bytes(config), "size": len(config)},
            "layers": [{"mediaType": MEDIA_TYPE_ZSTD, "digest": layout.put_bytes(blob), "size": len(blob)}],
        }
    )
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest))])
    return layout


def _flip_middle(b: bytes) -> bytes:
    data = bytearray(b)
    data[len(data) // 2] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize(
    ("case", "damage", "why"),
    [
        ("flipped byte", _flip_middle, "checksum|corrupt|error"),
        ("truncated", lambda b: b[: len(b) // 2], "cut short"),
        ("checksum cut off", lambda b: b[:-4], "cut short"),
        ("gzip bytes", lambda b: gzip.compress(b"x" * 100, mtime=0), "Unknown frame descriptor"),
        ("empty", lambda b: b"", "no zstd frame"),
        ("trailing garbage", lambda b: b + b"garbage!", "Unknown frame descriptor"),
    ],
)
def test_corrupt_zstd_layer_is_refused(tmp_path: Path, case: str, damage: Callable[[bytes], bytes], why: str) -> None:
    tar = tar_of(OK) + b"\0" * 1024 * 64  # long enough that cutting it in half cuts the frame
    good = zstd_compressor().compress(tar)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    layout = zstd_layout(tmp_path / "layout", damage(good), diff_id)
    layout.verify()  # the digests are right: only decompressing finds the damage
    area = tmp_path / "area"
    area.mkdir()
    with pytest.raises(VerifyError, match="cannot be decompressed") as err:
        unpack_layout(layout, area / "root", arch="amd64")
    assert MEDIA_TYPE_ZSTD in err.value.why
    assert re.search(why, err.value.why), err.value.why
    assert list(area.iterdir()) == []  # nothing left behind
    manifest = layout.read_json(layout.index()[0])
    blob = layout.blob_path(manifest["layers"][0]["digest"])
    with pytest.raises(VerifyError, match="cannot be decompressed"):
        layer_diff_id(blob, MEDIA_TYPE_ZSTD)


def test_multi_frame_zstd_layer_from_another_tool_unpacks(tmp_path: Path) -> None:
    """Other writers (zstd:chunked, pzstd) split a layer into frames and add skippable frames: read them all."""
    tar = tar_of(OK)
    half = len(tar) // 2
    skippable = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"meta"
    cctx = zstandard.ZstdCompressor(level=3)
    blob = cctx.compress(tar[:half]) + skippable + cctx.compress(tar[half:])
    layout = zstd_layout(tmp_path / "layout", blob, "sha256:" + hashlib.sha256(tar).hexdigest())
    unpack_layout(layout, tmp_path / "root", arch="amd64")
    assert (tmp_path / "root").is_dir()


def test_zstd_layer_with_wrong_diff_id_is_refused(tmp_path: Path) -> None:
    layout = zstd_layout(tmp_path / "layout", zstd_compressor().compress(tar_of(OK)), "sha256:" + "0" * 64)
    area = tmp_path / "area"
    area.mkdir()
    with pytest.raises(VerifyError, match="diff_id"):
        unpack_layout(layout, area / "root", arch="amd64")
    assert list(area.iterdir()) == []


def test_compression_choices() -> None:
    assert check_compression("zstd") == "zstd" and check_compression("gzip") == "gzip"
    with pytest.raises(UsageError, match="unknown compression 'xz'"):
        check_compression("xz")
    assert ZSTD_LEVEL == 19


def test_cli_image_llvm_compression_zstd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = make_record(tmp_path)
    parser = argparse.ArgumentParser()
    oci_cli.register(parser.add_subparsers(), common_parsers())
    settings = Settings(
        root=tmp_path, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True, variant="support"
    )
    digests = {}
    for comp in ("gzip", "zstd"):
        out = tmp_path / comp
        args = parser.parse_args(
            ["image", "llvm", "--record", str(rec), "--output", str(out), "--compression", comp, "--no-attest"]
        )
        assert args.func(args, settings) == 0
        layout = Layout(out)
        manifest = layout.read_json(layout.index()[0])
        digests[comp] = manifest["layers"][0]["mediaType"]
    assert digests == {"gzip": MEDIA_TYPE_GZIP, "zstd": MEDIA_TYPE_ZSTD}
    assert parser.parse_args(["image", "llvm"]).compression == "gzip"  # gzip stays the default
    with pytest.raises(SystemExit):
        parser.parse_args(["image", "llvm", "--compression", "xz"])
