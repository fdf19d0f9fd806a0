"""Local OCI image layouts as pull/inspect sources: parsing, selection and the same checks as a registry pull."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from test_oci_pull_integrity import tiny_image

from hermetic.core.errors import UsageError, VerifyError
from hermetic.oci.index import merge_layouts
from hermetic.oci.layout import Layout
from hermetic.oci.targets import parse_image_source
from hermetic.oci.transfer import pull_local
from hermetic.oci.types import MT_MANIFEST, REF_NAME, Descriptor, LayoutRef, Reference
from hermetic.oci.unpack import unpack_layout

pytestmark = pytest.mark.unit


def named_layout(path: Path) -> Layout:
    """One layout holding two images, told apart by their ref names (as `skopeo copy … oci:DIR:TAG` writes)."""
    a, desc_a = tiny_image(path.parent / "a", files={"usr/which": b"first"})
    b, desc_b = tiny_image(path.parent / "b", files={"usr/which": b"second"})
    out = Layout(path)
    out.init()
    for src, desc in ((a, desc_a), (b, desc_b)):
        for blob in [desc, *src.children(desc)]:
            out.blob_path(blob.digest).write_bytes(src.blob_path(blob.digest).read_bytes())
    out.write_index(
        [
            Descriptor(MT_MANIFEST, desc_a.digest, desc_a.size, annotations={REF_NAME: "first"}),
            Descriptor(MT_MANIFEST, desc_b.digest, desc_b.size, annotations={REF_NAME: "second"}),
        ]
    )
    return out


def test_parse_oci_path_and_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = named_layout(tmp_path / "lay")
    assert parse_image_source(f"oci:{layout.path}:second") == LayoutRef(layout.path, "second")
    assert parse_image_source(f"oci:{layout.path}") == LayoutRef(layout.path, "")
    assert parse_image_source(str(layout.path)) == LayoutRef(layout.path, "")
    monkeypatch.chdir(tmp_path)
    assert parse_image_source("lay") == LayoutRef(Path("lay"), "")  # a plain existing layout directory
    colon = tmp_path / "with:colon"
    os.rename(layout.path, colon)
    assert parse_image_source(f"oci:{colon}") == LayoutRef(colon, "")  # the path as given wins
    ref = parse_image_source("127.0.0.1:5000/llvm-support-19.1.7:19.1.7")
    assert isinstance(ref, Reference) and ref.registry == "127.0.0.1:5000"


@pytest.mark.parametrize("text", ["/nonexistent", "oci:/nonexistent", "oci:/nonexistent:tag", "./nope", "No/Such/Dir"])
def test_missing_local_path_says_no_such_file(text: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_image_source(text)
    assert "no such file or directory" in exc.value.what
    assert "invalid image reference" not in exc.value.what


def test_directory_that_is_not_a_layout(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an OCI image layout"):
        parse_image_source(f"oci:{tmp_path}")


def test_pull_local_by_tag_then_unpack(tmp_path: Path) -> None:
    layout = named_layout(tmp_path / "lay")
    src = parse_image_source(f"oci:{layout.path}:second")
    assert isinstance(src, LayoutRef)
    staged = pull_local(src, tmp_path / "staging")
    assert staged.annotations[REF_NAME] == "second"
    assert staged.platform == {"architecture": "amd64", "os": "linux"}
    unpack_layout(Layout(tmp_path / "staging"), tmp_path / "root")
    assert (tmp_path / "root/usr/which").read_bytes() == b"second"
    with pytest.raises(UsageError, match="no image named 'third'"):
        pull_local(LayoutRef(layout.path, "third"), tmp_path / "other")
    with pytest.raises(UsageError, match="holds 2 images"):
        pull_local(LayoutRef(layout.path), tmp_path / "other")


def test_pull_local_picks_the_platform_from_an_index(tmp_path: Path) -> None:
    amd, _ = tiny_image(tmp_path / "amd", "amd64", {"usr/arch": b"amd64"})
    arm, _ = tiny_image(tmp_path / "arm", "arm64", {"usr/arch": b"arm64"})
    merge_layouts([amd.path, arm.path], tmp_path / "multi")
    pull_local(LayoutRef(tmp_path / "multi"), tmp_path / "staging", arch="arm64")
    unpack_layout(Layout(tmp_path / "staging"), tmp_path / "root")
    assert (tmp_path / "root/usr/arch").read_bytes() == b"arm64"
    with pytest.raises(UsageError, match="s390x"):
        pull_local(LayoutRef(tmp_path / "multi"), tmp_path / "nope", arch="s390x")


def test_pull_local_refuses_another_arch_of_a_single_image(tmp_path: Path) -> None:
    layout, _ = tiny_image(tmp_path / "l", "amd64")
    with pytest.raises(VerifyError) as exc:
        pull_local(LayoutRef(layout.path), tmp_path / "staging", arch="arm64")
    assert "amd64" in exc.value.what and "arm64" in exc.value.what
    assert not (tmp_path / "staging").exists()


def test_pull_local_refuses_a_tampered_layer_and_keeps_nothing(tmp_path: Path) -> None:
    layout, desc = tiny_image(tmp_path / "l")
    blob = layout.blob_path(layout.children(desc)[1].digest)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    area = tmp_path / "area"
    area.mkdir()
    with pytest.raises(VerifyError, match="does not match its digest"):
        pull_local(LayoutRef(layout.path), area / "staging")
    assert list(area.iterdir()) == []


def test_pull_local_refuses_wrong_diff_ids(tmp_path: Path) -> None:
    import json

    from hermetic.oci.types import MT_CONFIG, canonical_json

    layout, desc = tiny_image(tmp_path / "l")
    manifest = layout.read_json(desc)
    config = json.loads(layout.read_blob(layout.children(desc)[0]))
    config["rootfs"]["diff_ids"] = ["sha256:" + hashlib.sha256(b"other").hexdigest()]
    cbytes = canonical_json(config)
    manifest["config"] = {"mediaType": MT_CONFIG, "digest": layout.put_bytes(cbytes), "size": len(cbytes)}
    mbytes = canonical_json(manifest)
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(mbytes), len(mbytes))])
    with pytest.raises(VerifyError, match="diff_id"):
        pull_local(LayoutRef(layout.path), tmp_path / "staging")
    assert not (tmp_path / "staging").exists()


def test_hostile_layer_from_a_local_layout_is_refused_on_unpack(tmp_path: Path) -> None:
    layout, _ = tiny_image(tmp_path / "l", files={"usr/ok": b"x", "usr/../../evil": b"x"})
    pull_local(LayoutRef(layout.path), tmp_path / "staging")
    area = tmp_path / "area"
    area.mkdir()
    with pytest.raises(VerifyError, match="refusing layer entry"):
        unpack_layout(Layout(tmp_path / "staging"), area / "root")
    assert list(area.iterdir()) == []


def test_cli_pull_and_inspect_a_local_layout(tmp_path: Path) -> None:
    """`hermetic pull oci:DIR:TAG --unpack D` unpacks that image; `--arch` of another platform is refused."""
    from helpers import hermetic

    layout = named_layout(tmp_path / "lay")
    dest = tmp_path / "unpacked"
    proc = hermetic("pull", f"oci:{layout.path}:second", "--unpack", str(dest), "-q")
    assert proc.stdout.startswith(f"oci:{layout.path}:second sha256:")
    assert (dest / "usr" / "which").read_bytes() == b"second"
    proc = hermetic("pull", f"oci:{layout.path}:first", "--unpack", str(tmp_path / "u2"), "--arch", "arm64", check=False)
    assert proc.returncode == 8 and "arm64" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "u2").exists()
    proc = hermetic("pull", f"oci:{layout.path}", "--layout", str(tmp_path / "l2"), "--with-attestations", check=False)
    assert proc.returncode == 2 and "--with-attestations needs a registry" in proc.stderr


def test_verify_names_a_local_layout_as_pull_does(tmp_path: Path) -> None:
    from hermetic.cli.artifacts import _artifact

    layout = named_layout(tmp_path / "lay")
    assert _artifact(f"oci:{layout.path}") == layout.path
    assert _artifact(str(layout.path)) == layout.path
    with pytest.raises(UsageError, match="no such file"):
        _artifact(f"oci:{tmp_path / 'gone'}")
    with pytest.raises(UsageError, match="cannot verify") as exc:
        _artifact(f"oci:{layout.path}:first")
    assert "not one tag" in exc.value.why
