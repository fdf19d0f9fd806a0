"""OCI layers, layouts and unpacking: determinism, hostile layers, tampered blobs."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from hermetic.core.errors import UsageError, VerifyError
from hermetic.model.record import RECORD_SCHEMA, scan_tree, tree_digest, write_json
from hermetic.oci import referrers
from hermetic.oci.image import spec_from_record, write_image
from hermetic.oci.index import merge_layouts
from hermetic.oci.layer import write_layer
from hermetic.oci.layout import Layout
from hermetic.oci.types import MT_CONFIG, MT_MANIFEST, REF_NAME, Descriptor, canonical_json
from hermetic.oci.unpack import clean_name, unpack_layout, verify_tree

pytestmark = pytest.mark.unit

VARIANT = "support"
PREFIX = f"usr/lib64/llvm-{VARIANT}-19.1.7"
EPOCH = 1736899200


def make_tree(install_root: Path, seed: int = 0) -> Path:
    top = install_root / PREFIX
    (top / "include/llvm/Support").mkdir(parents=True)
    (top / "lib/cmake/llvm").mkdir(parents=True)
    (top / "bin").mkdir()
    (top / "include/llvm/Support/Casting.h").write_text("#pragma once\n" * 50)
    (top / "lib/cmake/llvm/LLVMConfig.cmake").write_text(
        'get_filename_component(LLVM_INSTALL_PREFIX "${CMAKE_CURRENT_LIST_FILE}" PATH)\n'
    )
    (top / "lib/libLLVMSupport.a").write_bytes(hashlib.sha256(str(seed).encode()).digest() * 8000)
    (top / "lib/libLLVMDemangle.so.19.1").write_bytes(b"\x7fELF" + b"\0" * 5000)
    os.symlink("libLLVMDemangle.so.19.1", top / "lib/libLLVMDemangle.so")
    os.link(top / "lib/libLLVMSupport.a", top / "lib/libLLVMSupport-copy.a")
    tool = top / "bin/llvm-config"
    tool.write_text("#!/bin/sh\necho 19.1.7\n")
    tool.chmod(0o755)
    deep = top / "include" / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / ("long-name-" + "x" * 80 + ".h")).write_text("// long path needs a PAX header\n")
    (top / "include/llvm/Support/ünïcode.def").write_text("x\n")
    for p in [install_root, *install_root.rglob("*")]:
        if not p.is_symlink():
            os.utime(p, (EPOCH + 12345 + seed, EPOCH + 12345 + seed))
    return top


def make_record(base: Path, seed: int = 0) -> Path:
    install = base / "install"
    make_tree(install, seed)
    entries = scan_tree(install)  # as hermetic.llvm records it: from the install root
    record = {
        "schema": RECORD_SCHEMA,
        "recipe": {"name": "llvm", "version": "19.1.7", "digest": "sha256:" + "ab" * 32},
        "variant": VARIANT,
        "options": {},
        "sources": [
            {
                "file": "llvm-project-19.1.7.src.tar.xz",
                "sha256": "82401fea7b79d0078043f7598b835284d6650a75b93e64b6f761ea7b63097501",
                "origin": "url",
            }
        ],
        "inputs_digest": "ef" * 32,
        "source_archive": {"file": "llvm-project-19.1.7.src-support.tar.xz", "sha256": "cd" * 32},
        "pruned": {
            "file": "llvm-project-19.1.7.src-support.tar.xz",
            "path": str(base / "llvm-project-19.1.7.src-support.tar.xz"),
            "sha256": "cd" * 32,
            "size": 1234,
            "key": "9a" * 32,
            "from": {
                "file": "llvm-project-19.1.7.src.tar.xz",
                "sha256": "82401fea7b79d0078043f7598b835284d6650a75b93e64b6f761ea7b63097501",
                "origin": "url",
            },
            "variant": VARIANT,
        },
        "prefix": "/" + PREFIX,
        "source_date_epoch": EPOCH,
        "offline": {"enforced": False, "method": "none", "reason": "test"},
        "jobs": 1,
        "wall_time_s": 1.0 + seed,
        "build_commands": None,
        "test_package": {"ran": True, "ptx": []},
        "tree": {"digest": tree_digest(entries), "size": 0, "files": [e.as_json() for e in entries]},
        "install_root": str(install),
    }
    path = base / "record.json"
    write_json(path, record)
    return path


def test_same_tree_in_two_directories_gives_the_same_digests(tmp_path: Path) -> None:
    results = []
    for i, where in enumerate(["a", "elsewhere/b"]):
        rec = make_record(tmp_path / where, seed=0)
        # a different clock and different unrelated record fields must not matter
        data = json.loads(rec.read_text())
        data["timings"] = {"build": 99.0 * (i + 1)}
        rec.write_text(json.dumps(data))
        results.append(write_image(spec_from_record(rec, arch="amd64"), tmp_path / where / "image"))
    a, b = results
    assert a.manifest.digest == b.manifest.digest
    assert a.layer.digest == b.layer.digest and a.layer.diff_id == b.layer.diff_id
    assert (a.layout / "index.json").read_bytes() == (b.layout / "index.json").read_bytes()
    other = write_image(spec_from_record(make_record(tmp_path / "c", seed=1), arch="amd64"), tmp_path / "c" / "image")
    assert other.manifest.digest != a.manifest.digest


def test_layer_is_normalised(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    result = write_image(spec_from_record(rec, arch="amd64"), tmp_path / "image")
    blob = Layout(result.layout).blob_path(result.layer.digest).read_bytes()
    assert blob[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no FNAME flag, mtime 0, OS unknown
    raw = gzip.decompress(blob)
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == result.layer.diff_id
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[:3] == ["usr", "usr/lib64", PREFIX]
    assert names == sorted(names, key=lambda n: n.split("/"))
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", EPOCH)
        assert m.issym() or m.mode & 0o022 == 0
    by_name = {m.name: m for m in members}
    assert by_name[f"{PREFIX}/lib/libLLVMSupport.a"].islnk() or by_name[f"{PREFIX}/lib/libLLVMSupport-copy.a"].islnk()
    assert by_name[f"{PREFIX}/lib/libLLVMDemangle.so"].linkname == "libLLVMDemangle.so.19.1"
    assert by_name[f"{PREFIX}/bin/llvm-config"].mode == 0o755


def test_config_labels_and_index(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    result = write_image(spec_from_record(rec, arch="arm64"), tmp_path / "image")
    layout = Layout(result.layout)
    (entry,) = layout.index()
    assert entry.platform == {"architecture": "arm64", "os": "linux"}
    assert entry.annotations[REF_NAME] == "llvm-support-19.1.7-linux-arm64"
    manifest = layout.read_json(entry)
    config = layout.read_json(Descriptor.from_json(manifest["config"], "m"))
    assert config["architecture"] == "arm64" and config["os"] == "linux"
    assert config["created"] == "2025-01-15T00:00:00Z"
    assert config["rootfs"]["diff_ids"] == [result.layer.diff_id]
    labels = config["config"]["Labels"]
    for key in ("title", "version", "source", "revision", "licenses"):
        assert labels[f"org.opencontainers.image.{key}"]
    assert labels["io.hermetic.variant"] == "support"
    assert labels["io.hermetic.recipe.digest"] == "sha256:" + "ab" * 32
    assert labels["io.hermetic.source.llvm-project-19.1.7.src.tar.xz"].startswith("sha256:82401fea")
    assert labels["io.hermetic.pruned.digest"] == "sha256:" + "cd" * 32
    assert json.loads((result.layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    layout.verify()


def test_unpack_equals_install_tree_and_verify_tree(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    result = write_image(spec_from_record(rec, arch="amd64"), tmp_path / "image")
    dest = tmp_path / "out"
    unpack_layout(Layout(result.layout), dest, arch="amd64")
    assert verify_tree(dest, rec) == []
    assert verify_tree(dest / PREFIX, rec) == []
    lib = dest / PREFIX / "lib"
    assert os.stat(lib / "libLLVMSupport.a").st_ino == os.stat(lib / "libLLVMSupport-copy.a").st_ino
    (lib / "libLLVMDemangle.so.19.1").write_bytes(b"changed")
    assert verify_tree(dest, rec) == ["differs (size, sha256): lib/libLLVMDemangle.so.19.1"]
    data = json.loads(rec.read_text())  # a record listing the prefix's contents directly works too
    data["tree"]["files"] = [e.as_json() for e in scan_tree(tmp_path / "install" / PREFIX)]
    rec.write_text(json.dumps(data))
    assert verify_tree(dest, rec) == ["differs (size, sha256): lib/libLLVMDemangle.so.19.1"]
    with pytest.raises(UsageError):
        unpack_layout(Layout(result.layout), dest, arch="amd64")  # not empty


def test_merge_layouts_into_one_index(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    amd = write_image(spec_from_record(rec, arch="amd64"), tmp_path / "amd64")
    arm = write_image(spec_from_record(rec, arch="arm64"), tmp_path / "arm64")
    root = merge_layouts([arm.layout, amd.layout], tmp_path / "multi")
    again = merge_layouts([amd.layout, arm.layout], tmp_path / "multi2")
    assert root.digest == again.digest
    out = Layout(tmp_path / "multi")
    out.verify()
    children = out.children(out.index()[0])
    assert [c.platform for c in children] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux"},
    ]
    assert {c.digest for c in children} == {amd.manifest.digest, arm.manifest.digest}
    dest = tmp_path / "unpacked"
    unpack_layout(out, dest, arch="arm64")
    assert verify_tree(dest, rec) == []


def test_merged_index_carries_each_platform_s_attestations(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    images = {arch: write_image(spec_from_record(rec, arch=arch), tmp_path / arch) for arch in ("amd64", "arm64")}
    for arch, img in images.items():
        layout = Layout(img.layout)
        for kind in ("sbom", "provenance"):
            referrers.attach(layout, img.manifest, f"application/x-test-{kind}", f"{kind} of {arch}".encode(),
                             f"{kind}.json", {referrers.ANN_KIND: kind})
    merge_layouts([images["arm64"].layout, images["amd64"].layout], tmp_path / "multi")
    out = Layout(tmp_path / "multi")
    out.verify()
    got = {(r.subject, r.kind): r.payload.read_bytes() for r in referrers.referrers(out)}
    assert got == {
        (img.manifest.digest, kind): f"{kind} of {arch}".encode()
        for arch, img in images.items() for kind in ("sbom", "provenance")
    }
    # a damaged attestation in a layout is not carried over silently
    victim = referrers.referrers(Layout(images["amd64"].layout))[0]
    victim.payload.write_bytes(b"tampered")
    with pytest.raises(VerifyError):
        merge_layouts([images["arm64"].layout, images["amd64"].layout], tmp_path / "multi3")
    assert not (tmp_path / "multi3").exists()


# -- hostile and damaged input ----------------------------------------------------


def layout_from_tar(path: Path, tar_bytes: bytes) -> Layout:
    layout = Layout(path)
    layout.init()
    blob = gzip.compress(tar_bytes, mtime=0)
    layer_digest = layout.put_bytes(blob)
    config = canonical_json(
        {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar_bytes).hexdigest()]},
        }
    )
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": layout.put_bytes(config), "size": len(config)},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": len(blob)}
            ],
        }
    )
    layout.write_index(
        [Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest), {"architecture": "amd64", "os": "linux"})]
    )
    return layout


def tar_of(*members: tuple[str, bytes, str, bytes]) -> bytes:
    """(name, type, linkname, data) entries."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, link, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return buf.getvalue()


REG, DIR, SYM, LNK = tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
OK = ("usr/ok.txt", REG, "", b"fine")

HOSTILE = {
    "traversal": [OK, ("usr/../../evil", REG, "", b"x")],
    "absolute": [OK, ("/tmp/hermetic-evil", REG, "", b"x")],
    "symlink-absolute-up": [OK, ("usr/passwd", SYM, "/../../etc/passwd", b"")],
    "symlink-loop": [OK, ("usr/a", SYM, "b/x", b""), ("usr/b", SYM, "a/y", b"")],
    "symlink-up": [OK, ("usr/up", SYM, "../../..", b"")],
    "symlink-chain": [("d1/d2", DIR, "", b""), ("d1/d2/s2", SYM, "..", b""), ("s1", SYM, "d1/d2/s2/../..", b"")],
    "write-through-symlink": [("usr", DIR, "", b""), ("usr/link", SYM, ".", b""), ("usr/link/x", REG, "", b"x")],
    "hardlink-up": [OK, ("usr/hard", LNK, "../../etc/passwd", b"")],
    "hardlink-absolute": [OK, ("usr/hard", LNK, "/etc/passwd", b"")],
    "hardlink-via-symlink": [("usr/l", SYM, ".", b""), OK, ("h", LNK, "usr/l/ok.txt", b"")],
    "char-device": [OK, ("usr/null", tarfile.CHRTYPE, "", b"")],
    "block-device": [OK, ("usr/sda", tarfile.BLKTYPE, "", b"")],
    "fifo": [OK, ("usr/fifo", tarfile.FIFOTYPE, "", b"")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_layer_is_refused_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    layout = layout_from_tar(tmp_path / "layout", tar_of(*HOSTILE[case]))
    area = tmp_path / "area"
    area.mkdir()
    dest = area / "root"
    with pytest.raises(VerifyError) as info:
        unpack_layout(layout, dest, arch="amd64")
    assert "refusing layer entry" in info.value.what
    assert list(area.iterdir()) == []
    assert not Path("/tmp/hermetic-evil").exists()


def test_benign_layer_unpacks(tmp_path: Path) -> None:
    tar = tar_of(
        ("usr", DIR, "", b""),
        OK,
        ("./usr/rel", SYM, "ok.txt", b""),
        ("usr/h", LNK, "usr/ok.txt", b""),
        ("usr/sub/in", SYM, "../ok.txt", b""),
    )
    layout = layout_from_tar(tmp_path / "layout", tar)
    unpack_layout(layout, tmp_path / "root", arch="amd64")
    assert (tmp_path / "root/usr/rel").read_text() == "fine"
    assert (tmp_path / "root/usr/sub/in").read_text() == "fine"
    assert (tmp_path / "root/usr/h").stat().st_nlink == 2


@pytest.mark.parametrize("name", ["../x", "/x", "a/../../x", "", "./"])
def test_clean_name_refuses(name: str) -> None:
    with pytest.raises(VerifyError):
        clean_name(name)


def test_tampered_layer_is_refused(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    result = write_image(spec_from_record(rec, arch="amd64"), tmp_path / "image")
    layout = Layout(result.layout)
    blob = layout.blob_path(result.layer.digest)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    with pytest.raises(VerifyError, match="does not match its digest"):
        layout.verify()
    with pytest.raises(VerifyError, match="does not match its digest"):
        unpack_layout(layout, tmp_path / "dest", arch="amd64")
    assert not (tmp_path / "dest").exists()


def test_layer_with_wrong_diff_id_is_refused(tmp_path: Path) -> None:
    layout = layout_from_tar(tmp_path / "layout", tar_of(OK))
    manifest_desc = layout.index()[0]
    manifest = layout.read_json(manifest_desc)
    config = layout.read_json(Descriptor.from_json(manifest["config"], "m"))
    config["rootfs"]["diff_ids"] = ["sha256:" + "0" * 64]
    data = canonical_json(config)
    manifest["config"] = {"mediaType": MT_CONFIG, "digest": layout.put_bytes(data), "size": len(data)}
    mbytes = canonical_json(manifest)
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(mbytes), len(mbytes))])
    area = tmp_path / "area"
    area.mkdir()
    with pytest.raises(VerifyError, match="diff_id"):
        unpack_layout(layout, area / "root", arch="amd64")
    assert list(area.iterdir()) == []


def test_unknown_compression_is_refused_with_the_choices(tmp_path: Path) -> None:
    rec = make_record(tmp_path)
    with pytest.raises(UsageError, match="unknown compression") as err:
        write_image(spec_from_record(rec), tmp_path / "image", compression="xz")
    assert "gzip, zstd" in err.value.fix
    assert not (tmp_path / "image").exists()


def test_not_a_layout_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        Layout(tmp_path).index()


def test_special_file_in_install_tree_is_refused(tmp_path: Path) -> None:
    top = tmp_path / PREFIX
    top.mkdir(parents=True)
    os.mkfifo(top / "fifo")
    with pytest.raises(VerifyError):
        write_layer(io.BytesIO(), tmp_path, PREFIX, EPOCH)
    shutil.rmtree(tmp_path / "usr")
