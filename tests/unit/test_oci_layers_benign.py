"""Layers as other tools write them: a `./` root entry, absolute symlinks, set-id bits, links across layers."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from hermetic.core.errors import VerifyError
from hermetic.oci.layout import Layout
from hermetic.oci.types import MT_CONFIG, MT_MANIFEST, Descriptor, canonical_json
from hermetic.oci.unpack import resolve_in_root, unpack_layout

pytestmark = pytest.mark.unit

REG, DIR, SYM = tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE


def tar_of(*members: tuple[str, bytes, str, bytes, int]) -> bytes:
    """(name, type, linkname, data, mode) entries, in the order given."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, link, data, mode in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = kind, link, mode
            info.size = len(data) if kind == REG else 0
            tar.addfile(info, io.BytesIO(data) if kind == REG else None)
    return buf.getvalue()


def layout_of(path: Path, *layers: bytes) -> Layout:
    layout = Layout(path)
    layout.init()
    blobs = [gzip.compress(t, mtime=0) for t in layers]
    diff_ids = ["sha256:" + hashlib.sha256(t).hexdigest() for t in layers]
    config = canonical_json({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids}})
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": layout.put_bytes(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layout.put_bytes(b),
                    "size": len(b)} for b in blobs],
    })
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest))])
    return layout


# What `tar -C root -c .` writes: the root as "./" first, every name below it starting with "./".
DOT_ROOT = tar_of(
    ("./", DIR, "", b"", 0o755),
    ("./etc/", DIR, "", b"", 0o755),
    ("./usr/share/zoneinfo/", DIR, "", b"", 0o755),
    ("./usr/share/zoneinfo/UTC", REG, "", b"TZif2", 0o644),
    ("./etc/localtime", SYM, "/usr/share/zoneinfo/UTC", b"", 0o777),
    ("./etc/dangling", SYM, "/no/such/file", b"", 0o777),
    ("./usr/bin/", DIR, "", b"", 0o755),
    ("./usr/bin/su", REG, "", b"#!/bin/sh\n", 0o4755),
    ("./usr/bin/wall", REG, "", b"#!/bin/sh\n", 0o2755),
    ("./tmp/", DIR, "", b"", 0o1777),
)


def test_dot_rooted_layer_with_absolute_symlinks_unpacks(tmp_path: Path) -> None:
    warnings: list[str] = []
    dest = tmp_path / "root"
    unpack_layout(layout_of(tmp_path / "l", DOT_ROOT), dest, warn=warnings.append)
    assert os.readlink(dest / "etc/localtime") == "/usr/share/zoneinfo/UTC"
    assert resolve_in_root(dest, "etc/localtime") == "usr/share/zoneinfo/UTC"
    assert (dest / "usr/share/zoneinfo/UTC").read_bytes() == b"TZif2"
    assert os.readlink(dest / "etc/dangling") == "/no/such/file"
    # set-id bits cleared, with one warning naming the entries; a directory keeps its sticky bit
    assert (dest / "usr/bin/su").stat().st_mode & 0o7777 == 0o755
    assert (dest / "usr/bin/wall").stat().st_mode & 0o7777 == 0o755
    assert (dest / "tmp").stat().st_mode & 0o7777 == 0o1777
    assert len(warnings) == 1 and "setuid/setgid" in warnings[0]
    assert "usr/bin/su" in warnings[0] and "usr/bin/wall" in warnings[0]


def test_no_warning_without_set_id_bits(tmp_path: Path) -> None:
    warnings: list[str] = []
    unpack_layout(layout_of(tmp_path / "l", tar_of(("./", DIR, "", b"", 0o755), ("./a", REG, "", b"x", 0o644))),
                  tmp_path / "root", warn=warnings.append)
    assert warnings == [] and (tmp_path / "root/a").read_bytes() == b"x"


def test_root_entry_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match="refusing layer entry"):
        unpack_layout(layout_of(tmp_path / "l", tar_of(("./", REG, "", b"x", 0o644))), tmp_path / "root")
    assert not (tmp_path / "root").exists()


def test_a_later_layer_cannot_turn_an_earlier_link_into_an_escape(tmp_path: Path) -> None:
    """`l -> a/b/../../z` stays inside while a/b is a directory; a second layer that makes a/b a link to `.`
    makes l climb above the root. Each layer alone passes; the tree as a whole is refused."""
    first = tar_of(("a/b/", DIR, "", b"", 0o755), ("l", SYM, "a/b/../../z", b"", 0o777))
    second = tar_of(("a/b", SYM, ".", b"", 0o777))
    area = tmp_path / "area"
    area.mkdir()
    with pytest.raises(VerifyError, match="refusing layer entry 'l'") as info:
        unpack_layout(layout_of(tmp_path / "l", first, second), area / "root")
    assert "climbs above the root" in info.value.why
    assert list(area.iterdir()) == []


@pytest.mark.parametrize(("links", "rel", "expected"), [
    ({"a": "/b/c"}, "a", "b/c"),
    ({"a": "/b", "b": "c/d"}, "a/x", "c/d/x"),
    ({"a": "../../x"}, "a", None),
    ({"d/a": "/../x"}, "d/a", None),
    ({"a": "b", "b": "a"}, "a", None),
    ({"d/a": "../x"}, "d/a", "x"),
])
def test_resolve_in_root(tmp_path: Path, links: dict[str, str], rel: str, expected: str | None) -> None:
    for name, target in links.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, tmp_path / name)
    if expected is None:
        with pytest.raises(ValueError):
            resolve_in_root(tmp_path, rel)
    else:
        assert resolve_in_root(tmp_path, rel) == expected
