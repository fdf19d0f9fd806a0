"""Consumers pick their platform from a multi-platform index in the real registry.

The index holds the tiny recipe's amd64 build (host toolchain) and its arm64 one (cross-built with zig, its
test_package run under qemu), written, merged and pushed with the CLI as a user would. `buildah bud --platform linux/ARCH` with a
COPY --from=<the index> and `hermetic pull --platform linux/ARCH` must each get that platform's tree,
which the ELF machine of an object in libTinySupport.a tells apart.

A FROM scratch build with COPY only runs nothing of the other architecture, so buildah needs no qemu for it.
"""

from __future__ import annotations

import platform
import struct
from pathlib import Path
from typing import Any

import pytest
from test_oci_registry import prefix_of

from devtools.buildah import buildah_copy_from, buildah_store
from helpers import hermetic
from hermetic.model.record import load_build_record
from hermetic.oci.unpack import verify_tree

ARCHES = ("amd64", "arm64")
ELF_MACHINE = {"amd64": 62, "arm64": 183}  # EM_X86_64, EM_AARCH64


def first_object_machine(archive: Path) -> int:
    """e_machine of the first ELF member of an ar archive (skipping its symbol and name tables)."""
    data = archive.read_bytes()
    assert data[:8] == b"!<arch>\n", f"{archive} is not an ar archive"
    pos = 8
    while pos + 60 <= len(data):
        size = int(data[pos + 48 : pos + 58].decode().strip())
        member = data[pos + 60 : pos + 60 + size]
        if member[:4] == b"\x7fELF":
            assert member[5] == 1, f"{archive}: a big-endian object"  # EI_DATA: ELFDATA2LSB
            return int(struct.unpack_from("<H", member, 18)[0])
        pos += 60 + size + size % 2  # members are 2-aligned
    raise AssertionError(f"{archive} holds no ELF object")


@pytest.fixture(scope="module")
def records(request: pytest.FixtureRequest) -> dict[str, Path]:
    if platform.machine() != "x86_64":
        pytest.skip("the arm64 build is cross-built from x86_64, and the amd64 one is this machine's host build")
    found = {
        "amd64": request.getfixturevalue("tiny_install"),
        "arm64": request.getfixturevalue("tiny_arm64_install"),
    }
    digests = {arch: load_build_record(path).tree.digest for arch, path in found.items()}
    assert digests["amd64"] != digests["arm64"], "the two builds gave one tree: nothing to tell the platforms apart by"
    return found


@pytest.fixture(scope="module")
def index_ref(records: dict[str, Path], registry: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The index of both builds, pushed; each build's image has its arch from its own record."""
    base = tmp_path_factory.mktemp("platforms")
    for arch, record in records.items():
        hermetic("image", "llvm", "--record", str(record), "--output", str(base / arch))
    hermetic("image", "index", *(str(base / arch) for arch in ARCHES), "--output", str(base / "multi"))
    ref = f"{registry.host}/platforms/tiny-support-1.0.0:1.0.0"
    hermetic("push", str(base / "multi"), ref, "--insecure")
    return ref


def check_tree(root: Path, arch: str, records: dict[str, Path]) -> None:
    """root (a rootfs) holds exactly the arch build's tree, with objects for that machine."""
    assert verify_tree(root, records[arch]) == [], f"not the {arch} tree"
    lib = root / prefix_of(load_build_record(records[arch])) / "lib" / "libTinySupport.a"
    assert first_object_machine(lib) == ELF_MACHINE[arch]


def test_buildah_copy_from_the_index_takes_the_build_platform(
    index_ref: str, records: dict[str, Path], tmp_path: Path
) -> None:
    """Both platforms in one store: the second build must not reuse the image the first pulled by the same name."""
    prefix = "/" + prefix_of(load_build_record(records["amd64"]))
    with buildah_store(tmp_path) as store:
        for arch in ("arm64", "amd64"):
            mnt = buildah_copy_from(
                store, index_ref, prefix, tmp_path / f"ctx-{arch}", f"localhost/consumer-{arch}",
                "--platform", f"linux/{arch}",
            )  # fmt: skip
            check_tree(mnt, arch, records)


@pytest.mark.parametrize("arch", ARCHES)
def test_hermetic_pull_takes_the_asked_platform(
    index_ref: str, records: dict[str, Path], tmp_path: Path, arch: str
) -> None:
    dest = tmp_path / "root"
    hermetic("pull", index_ref, "--unpack", str(dest), "--insecure", "--platform", f"linux/{arch}")
    check_tree(dest, arch, records)
