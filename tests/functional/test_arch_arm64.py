"""--arch arm64: `support` cross-built on this x86_64 machine with the pinned zig toolchain, its
test_package run under qemu-aarch64-static with Debian's arm64 loader and libc.

One arm64 build (the session fixture `arm64_support_install`): two builds in different directories gave
the same tree on the Debian 12 dev machine (tests/golden/digests.json), and this build, in another
directory (and on CI another machine), must give that digest too.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def record_path(arm64_support_install: Path) -> Path:
    return arm64_support_install


@pytest.fixture(scope="module")
def arm64(record_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(record_path.read_text())
    return data


def _prefix(rec: dict[str, Any]) -> Path:
    return Path(str(rec["install_root"])) / str(rec["prefix"]).lstrip("/")


def test_the_record_says_arm64_and_the_aarch64_target(arm64: dict[str, Any]) -> None:
    assert arm64["arch"] == "arm64"
    tc = arm64["toolchain_id"]
    assert tc["name"] == "zig" and tc["target"] == "aarch64-linux-gnu.2.28"
    assert arm64["toolchain"]["machine"] == "linux-x86_64"  # built here, for arm64


@pytest.mark.parametrize(("lib", "objects"), [("libLLVMSupport.a", 100), ("libLLVMDemangle.a", 3)])
def test_the_static_libraries_hold_aarch64_objects(arm64: dict[str, Any], lib: str, objects: int) -> None:
    # readelf reads every member of an archive: one `Machine:` line per object
    out = subprocess.run(["readelf", "-h", str(_prefix(arm64) / "lib" / lib)], capture_output=True, text=True, check=True).stdout
    machines = re.findall(r"^\s*Machine:\s*(.+?)\s*$", out, re.M)
    assert len(machines) > objects and set(machines) == {"AArch64"}, sorted(set(machines))
    assert set(re.findall(r"^\s*Class:\s*(\S+)", out, re.M)) == {"ELF64"}


def test_llvm_was_configured_for_the_arm64_host(arm64: dict[str, Any]) -> None:
    config = (_prefix(arm64) / "include" / "llvm" / "Config" / "llvm-config.h").read_text()
    assert '#define LLVM_HOST_TRIPLE "aarch64-unknown-linux-gnu"' in config
    assert "#define LLVM_NATIVE_ARCH AArch64" in config


def test_the_test_package_ran_under_qemu_and_printed_the_version(arm64: dict[str, Any], record_path: Path) -> None:
    tp = arm64["test_package"]
    assert tp["ran"] is True
    assert tp["emulator"] == "qemu-aarch64-static -L /usr/aarch64-linux-gnu"
    assert tp["output"] == "LLVM 19.1.7"
    # and Conan's log shows the command it ran: the aarch64 program under qemu
    log = (record_path.parent / "build.log").read_text()
    assert re.search(r"qemu-aarch64-static -L /usr/aarch64-linux-gnu \S*llvm_test_package", log), "no qemu run in build.log"


def test_no_build_machine_path_in_the_tree(arm64: dict[str, Any], record_path: Path, source_cache: Path) -> None:
    """What a second build elsewhere would differ in: the work dir (native tablegen, wrappers, zig's caches)
    or the unpacked toolchain's directory."""
    marks = [str(record_path.parents[2]).encode(), str(source_cache / "toolchains").encode()]
    leaks = [f for f in _prefix(arm64).rglob("*") if f.is_file() and any(m in f.read_bytes() for m in marks)]
    assert leaks == []


def test_same_tree_as_the_two_builds_on_the_debian_dev_machine(arm64: dict[str, Any], golden: dict[str, Any]) -> None:
    theirs = golden["llvm-support-zig-arm64"]
    assert len(theirs["measured"]) == 2 and theirs["toolchain_id"] == arm64["toolchain_id"], "another toolchain"
    assert theirs["tree"] == arm64["tree"]["digest"], (
        f"this build gave {arm64['tree']['digest']}, tests/golden/digests.json {theirs['tree']}"
    )
