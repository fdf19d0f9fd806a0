"""`hermetic all` on the tiny recipe: a first run plans and runs every step; a second one finds the build done,
needs no source, and writes the image again from it."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import hermetic


def _states(stdout: str) -> dict[str, str]:
    lines = stdout.splitlines()
    assert lines[0] == "plan:" and lines[-1] == "all: done", stdout
    out = {}
    for line in lines[1:8]:
        state, rest = line.split("[", 1)[1].split("]", 1)
        words = rest.split()
        out[f"{words[0]} {words[1]}"] = state.strip()
    return out


def test_all_builds_then_finds_the_build_done_and_writes_the_image(
    tiny: tuple[str, ...], source_cache: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    args = ("all", *tiny, "--variant", "support", "--work-dir", str(work), "--cache", str(source_cache), "--quiet",
            "--toolchain", "host")
    first = hermetic(*args)
    planned = _states(first.stdout)
    # the source and the wheelhouse may be cached already (run or done); the wheel recipes build against
    # recipes/llvm only, so tiny has none
    assert {k: planned[k] for k in ("toolchain host", "build tiny-support", "image tiny-support", "wheel (none)")} == {
        "toolchain host": "skip", "build tiny-support": "run", "image tiny-support": "run", "wheel (none)": "skip",
    }, first.stdout
    # the release archive is fetched only for a prune that runs: a cached subset needs none (what a bundle feeds)
    assert (planned["fetch source"], planned["prune source"]) in {("run", "run"), ("done", "run"), ("skip", "done")}, \
        first.stdout
    assert planned["fetch wheelhouse"] in {"run", "done"}, first.stdout
    record = work / "tiny" / "support" / "record.json"
    tree = json.loads(record.read_text())["tree"]["digest"]
    again = hermetic(*args)
    # a finished tree needs no source, and no wheel runs, so no wheelhouse either
    assert _states(again.stdout) == {
        "toolchain host": "skip", "fetch source": "skip", "fetch wheelhouse": "skip", "prune source": "skip",
        "build tiny-support": "done", "image tiny-support": "run", "wheel (none)": "skip",
    }, again.stdout
    assert "fetch source           inputs" in again.stdout and "not needed: build tiny-support is up to date" in again.stdout
    assert f"up to date: {tree}" in again.stdout
    layout = work / "images" / "tiny-support-1.0.0-linux-amd64"
    assert (layout / "index.json").is_file() and (layout / "referrers.json").is_file()
    # the record the build wrote is the one the image came from: nothing was rebuilt
    assert json.loads(record.read_text())["tree"]["digest"] == tree
