"""`hermetic inspect` of a build record reads as text: no Python reprs, no empty record name."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import hermetic
from schemas.examples import fake_llvm_build

pytestmark = pytest.mark.unit


def test_inspect_a_record_renders_lists_and_the_tree_check(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "w")
    out = hermetic("inspect", str(rec)).stdout
    assert "()" not in out and "[{" not in out and "{'" not in out
    assert "  on disk   matches the record" in out
    sources = next(line for line in out.splitlines() if line.lstrip().startswith("sources"))
    assert "file=llvm-toolchain-19_19.1.7.orig.tar.xz" in sources and "sha256=" in sources
