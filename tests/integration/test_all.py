"""`hermetic all` on a variant that is already built: the plan says so, and the image is written from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import hermetic

pytestmark = pytest.mark.integration


def test_all_after_a_build_skips_it_and_writes_the_image(support_install: Path, source_cache: Path) -> None:
    work = support_install.parents[2]  # WORK/llvm/support/record.json
    tree = json.loads(support_install.read_text())["tree"]["digest"]
    proc = hermetic("all", "--variant", "support", "--work-dir", str(work), "--cache", str(source_cache), "--quiet",
                    "--toolchain", "host")
    lines = proc.stdout.splitlines()
    assert lines[0] == "plan:" and lines[-1] == "all: done"
    states = {line.split("]")[1].split()[0] + " " + line.split("]")[1].split()[1]: line.split("[")[1].split("]")[0].strip()
              for line in lines[1:8]}
    # a finished tree needs no source, and no wheel runs (support has no NVPTX), so no wheelhouse either
    assert states == {
        "toolchain host": "skip", "fetch source": "skip", "fetch wheelhouse": "skip", "prune source": "skip",
        "build llvm-support": "done", "image llvm-support": "run", "wheel (none)": "skip",
    }, proc.stdout
    assert "fetch source           inputs" in proc.stdout and "not needed: build llvm-support is up to date" in proc.stdout
    assert f"up to date: {tree}" in proc.stdout
    layout = work / "images" / "llvm-support-19.1.7-linux-amd64"
    assert (layout / "index.json").is_file() and (layout / "referrers.json").is_file()
    # the record the build wrote is the one the image came from: nothing was rebuilt
    assert json.loads(support_install.read_text())["tree"]["digest"] == tree
