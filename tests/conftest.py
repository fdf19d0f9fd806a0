"""Shared fixtures: the real `support` LLVM variant, built once per session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import hermetic


@pytest.fixture(scope="session")
def source_cache() -> Path:
    """The real source cache: fetched once, reused across runs (HERMETIC_CACHE or the default)."""
    return Path(os.environ.get("HERMETIC_CACHE", Path.home() / ".cache" / "hermetic"))


@pytest.fixture(scope="session")
def support_install(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Path:
    """Path of the record.json of a real `support` build from the pruned 19.1.7 source.

    Built with the host toolchain (Debian's gcc): the many rebuilds of the tests that use it cost a
    third of a zig build each. The pinned toolchain's own build is `zig_support_install`.
    HERMETIC_TEST_SUPPORT=RECORD reuses a finished host build for local runs.
    """
    given = os.environ.get("HERMETIC_TEST_SUPPORT")
    if given:
        record = Path(given)
        assert (json.loads(record.read_text()).get("toolchain_id") or {}).get("kind") == "host", f"{record} is not a host build"
        return record
    work = tmp_path_factory.mktemp("support-a")
    jobs = str(os.cpu_count() or 2)
    hermetic(
        "build", "llvm", "--variant", "support", "--work-dir", str(work), "--cache", str(source_cache),
        "--jobs", jobs, "--offline", "auto", "--quiet", "--toolchain", "host",
    )
    record = work / "llvm" / "support" / "record.json"
    assert json.loads(record.read_text())["tree"]["files"], "support build installed nothing"
    return record


@pytest.fixture(scope="session")
def zig_support_install(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Path:
    """Path of the record.json of a real `support` build with the pinned zig toolchain.

    About 10 to 15 minutes on 2 cores (zig also builds its libc++ and glibc stubs into the work dir's zig
    cache, which later builds in the same work dir reuse). HERMETIC_TEST_ZIG_SUPPORT=RECORD reuses a
    finished one (a record.json with a zig `toolchain_id`) for local runs; tests may add to its work dir.
    """
    given = os.environ.get("HERMETIC_TEST_ZIG_SUPPORT")
    if given:
        record = Path(given)
    else:
        work = tmp_path_factory.mktemp("zig-support")
        hermetic(
            "build", "llvm", "--variant", "support", "--toolchain", "zig", "--work-dir", str(work),
            "--cache", str(source_cache), "--jobs", str(os.cpu_count() or 2), "--offline", "auto", "--quiet",
        )
        record = work / "llvm" / "support" / "record.json"
    data = json.loads(record.read_text())
    assert (data.get("toolchain_id") or {}).get("kind") == "zig", f"{record} is not a zig build"
    return record


@pytest.fixture(scope="session")
def arm64_support_install(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Path:
    """Path of the record.json of a real `support` build for arm64, cross-built here with zig (tests under qemu).

    About twice the CPU of the zig `support` build (reports/arm64-support.json). HERMETIC_TEST_ARM64_SUPPORT=RECORD
    reuses a finished one for local runs.
    """
    given = os.environ.get("HERMETIC_TEST_ARM64_SUPPORT")
    if given:
        return Path(given)
    work = tmp_path_factory.mktemp("arm64-support")
    hermetic(
        "build", "llvm", "--variant", "support", "--toolchain", "zig", "--arch", "arm64", "--work-dir", str(work),
        "--cache", str(source_cache), "--jobs", str(os.cpu_count() or 2), "--offline", "auto", "--quiet",
    )
    return work / "llvm" / "support" / "record.json"
