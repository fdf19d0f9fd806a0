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
    third of a zig build each. The pinned toolchain's own build is `support_zig_install`.
    """
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
def support_zig_install(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Path:
    """Path of the record.json of a real `support` build with the pinned zig toolchain."""
    work = tmp_path_factory.mktemp("support-zig")
    hermetic(
        "build", "llvm", "--variant", "support", "--work-dir", str(work), "--cache", str(source_cache),
        "--jobs", str(os.cpu_count() or 2), "--offline", "auto", "--quiet", "--toolchain", "zig",
    )
    return work / "llvm" / "support" / "record.json"


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
