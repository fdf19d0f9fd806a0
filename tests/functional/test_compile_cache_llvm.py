"""The shared compile cache on a real LLVM build: `zig_support_install` compiled `support` cold through a fresh
file:// cache; a warm build in another work directory reads it, hits, and gets the same tree. What the cache does
with another user, a cache that dies, a poisoned entry and a Redis backend is shown on the tiny recipe
(tests/integration/test_compile_cache_ccache.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, hermetic


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, zig_support_install: Path, zig_compile_cache: Path,
         source_cache: Path) -> dict[str, Any]:
    """The same build in another directory, through the cache the cold build filled: about a minute on 2 cores."""
    work = tmp_path_factory.mktemp("zig-warm") / "elsewhere" / "work"
    hermetic(
        "build", "llvm", "--llvm-recipe", str(ROOT / "recipes" / "llvm"), "--variant", "support", "--toolchain", "zig",
        "--work-dir", str(work), "--cache", str(source_cache), "--jobs", str(os.cpu_count() or 2), "--offline", "auto",
        "--quiet", "--compile-cache", f"file://{zig_compile_cache}",
    )
    data: dict[str, Any] = json.loads((work / "llvm" / "support" / "record.json").read_text())
    return data


def test_the_cold_build_filled_the_cache(zig_support_install: Path) -> None:
    cold = json.loads(zig_support_install.read_text())["compile_cache"]
    assert cold["answered"] is True and cold["stats"]["misses"] >= 150 and cold["stats"]["hit_rate"] < 0.1, cold


def test_the_warm_build_in_another_directory_hits_and_gets_the_same_tree(
    warm: dict[str, Any], zig_support_install: Path
) -> None:
    """The zig wrappers are scripts at per-work-dir paths: the key names the toolchain, not them."""
    cold = json.loads(zig_support_install.read_text())
    assert warm["tree"]["digest"] == cold["tree"]["digest"]
    assert warm["inputs_digest"] == cold["inputs_digest"]  # so substitution and verify match either way
    stats = warm["compile_cache"]["stats"]
    assert stats["hit_rate"] >= 0.95 and stats["remote_errors"] == 0, stats
    assert stats["hits"] >= cold["compile_cache"]["stats"]["misses"] * 0.95, stats
    assert "distributed" not in warm  # nothing to spread: every compile was a hit or ran here
