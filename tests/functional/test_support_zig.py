"""`support` with the pinned zig toolchain: the digest measured on the GPU runner and on the Debian dev machine
(tests/golden/digests.json), and nothing of the host in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def built(zig_support_install: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(zig_support_install.read_text())


def test_same_tree_as_the_gpu_runner_and_the_debian_dev_machine(built: dict, golden: dict) -> None:  # type: ignore[type-arg]
    """Another distribution, another host compiler, 16 cores instead of 2 (and a compile cache and compile hosts
    here): the same bits."""
    theirs = golden["llvm-support-zig-amd64"]
    assert {m["machine"].split(":")[0] for m in theirs["measured"]} == {"Debian 12 (bookworm) dev machine, x86_64, 2 cores",
                                                                      "GPU runner"}
    assert theirs["toolchain_id"] == built["toolchain_id"], "the committed digest was made with another toolchain"
    assert theirs["tree"] == built["tree"]["digest"], (
        f"this machine built {built['tree']['digest']}, the runner and the dev machine {theirs['tree']}: "
        "the pinned toolchain does not give the same bits everywhere"
    )


def test_record_names_the_pinned_tools(built: dict) -> None:  # type: ignore[type-arg]
    tc = built["toolchain_id"]
    assert tc["name"] == "zig" and tc["target"] == "x86_64-linux-gnu.2.28" and len(tc["sha256"]) == 64
    assert built["toolchain"]["cc"].startswith("clang version 22.")
    assert built["toolchain"]["cmake"] == "cmake version 4.4.4"
    text = json.dumps(built)
    for host_path in ("/usr/include", "/usr/lib/gcc", "gcc version"):
        assert host_path not in text, host_path


def test_no_host_or_build_path_in_the_installed_files(built: dict, zig_support_install: Path, source_cache: Path) -> None:  # type: ignore[type-arg]
    work = str(zig_support_install.parents[2])
    root = Path(built["install_root"])
    for f in built["tree"]["files"]:
        p = root / f["path"]
        if not p.is_file() or p.is_symlink():
            continue
        data = p.read_bytes()
        for needle in (work.encode(), str(source_cache).encode(), b"/usr/lib/gcc", b"zig-cache"):
            assert needle not in data, (f["path"], needle)
