"""Shared fixtures: the real `support` LLVM variant, built once per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def hermetic(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would."""
    proc = subprocess.run(
        [sys.executable, "-m", "hermetic", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def source_cache() -> Path:
    """The real source cache: fetched once, reused across runs (HERMETIC_CACHE or the default)."""
    return Path(os.environ.get("HERMETIC_CACHE", Path.home() / ".cache" / "hermetic"))


@pytest.fixture(scope="session")
def support_install(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Path:
    """Path of the record.json of a real `support` build from the pruned 19.1.7 source."""
    work = tmp_path_factory.mktemp("support-a")
    jobs = str(os.cpu_count() or 2)
    hermetic(
        "build", "llvm", "--variant", "support", "--work-dir", str(work), "--cache", str(source_cache),
        "--jobs", jobs, "--offline", "auto", "--quiet",
    )
    record = work / "llvm" / "support" / "record.json"
    assert json.loads(record.read_text())["tree"]["files"], "support build installed nothing"
    return record
