"""A second LLVM release from the same recipe: `support` of 22.1.8, from Debian's orig tarball fetched
through apt, built with the pinned zig toolchain beside the default release's build in one work dir."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from helpers import hermetic

VERSION = "22.1.8"
PREFIX = f"usr/lib64/llvm-support-{VERSION}"


@pytest.fixture(scope="module")
def built(zig_support_install: Path, source_cache: Path) -> dict[str, Any]:
    work = zig_support_install.parents[2]  # <work>/llvm/support/record.json: the same work dir and zig cache
    before = zig_support_install.read_bytes()
    hermetic(
        "build", "llvm", "--llvm-version", VERSION, "--variant", "support", "--toolchain", "zig",
        "--work-dir", str(work), "--cache", str(source_cache), "--jobs", str(os.cpu_count() or 2),
        "--offline", "auto", "--quiet",
    )
    rec = json.loads((work / "llvm" / f"support-{VERSION}" / "record.json").read_text())
    return {"record": rec, "default_untouched": zig_support_install.read_bytes() == before}


def test_the_release_is_recorded_and_installed_under_its_own_prefix(built: dict[str, Any]) -> None:
    rec = built["record"]
    assert rec["recipe"]["version"] == VERSION
    assert rec["prefix"] == f"/{PREFIX}"
    assert rec["source_date_epoch"] == 1781740800
    assert rec["sources"][0]["sha256"] == "b49b9277aef97616320b2da259e1f8174c65b0ce2fbe2e8629644a97693402fe"
    assert rec["test_package"]["output"] == f"LLVM {VERSION}"
    paths = [f["path"] for f in rec["tree"]["files"]]
    assert sorted(p.rsplit("/", 1)[1] for p in paths if p.startswith(f"{PREFIX}/lib/lib")) == [
        "libLLVMDemangle.a", "libLLVMSupport.a"]
    config = Path(rec["install_root"], PREFIX, "lib/cmake/llvm/LLVMConfigVersion.cmake").read_text()
    assert f'"{VERSION}"' in config


def test_the_default_release_builds_beside_it(built: dict[str, Any]) -> None:
    assert built["default_untouched"], "the 19.1.7 build's record changed"


def test_same_tree_as_the_committed_build(built: dict[str, Any], golden: dict[str, Any]) -> None:
    """The pinned toolchain makes the tree a function of the inputs: this machine's build gives the digest
    tests/golden/digests.json names (a Debian 12 dev machine's build)."""
    committed = golden["llvm-support-22.1.8-zig-amd64"]
    assert committed["toolchain_id"] == built["record"]["toolchain_id"]
    assert built["record"]["tree"]["digest"] == committed["tree"]
