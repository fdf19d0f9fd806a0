"""Two hermetic processes filling the same place in one cache take turns (core/staging.fill_lock).

Real processes: the first unpacks a toolchain slowly; two more, started while it does, must wait, then use the
first's tree without filling their own (which would have renamed over a tree a build may be running from), and
the lock leaves nothing behind in the cache.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from helpers import ROOT
from hermetic.fetch import toolchain
from hermetic.model import toolchains

pytestmark = pytest.mark.unit


def _tc() -> toolchains.Toolchain:
    return toolchains.for_root(ROOT, "zig")


def _slow_fill(base: Path) -> int:
    def fill(tmp: Path) -> int:
        (tmp / "zig").write_text("first\n")
        (base / "first-started").touch()
        while not (base / "go").exists():  # held open until the test says so
            time.sleep(0.02)
        return 1

    return fill


def _install(base: Path, who: str) -> None:
    said: list[str] = []

    def fill(tmp: Path) -> int:
        (base / f"{who}-filled").touch()
        (tmp / "zig").write_text(f"{who}\n")
        return 1

    chosen = _slow_fill(base) if who == "first" else fill
    dest = toolchain._install(base / "cache", _tc(), {"file": "f", "sha256": "s"}, chosen, said.append)
    (base / f"{who}-log").write_text("\n".join(said) + f"\n{dest}\n")


def test_later_processes_wait_and_use_the_first_s_tree(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    first = ctx.Process(target=_install, args=(tmp_path, "first"))
    first.start()
    deadline = time.monotonic() + 30
    while not (tmp_path / "first-started").exists():
        assert time.monotonic() < deadline and first.is_alive(), "the first process never started filling"
        time.sleep(0.02)
    later = {who: ctx.Process(target=_install, args=(tmp_path, who)) for who in ("second", "third")}
    for p in later.values():
        p.start()
    time.sleep(1.0)
    try:
        for who, p in later.items():
            assert p.is_alive(), f"the {who} process did not wait for the first"
            assert not (tmp_path / f"{who}-filled").exists(), f"the {who} process filled the same place meanwhile"
    finally:
        (tmp_path / "go").touch()
        for p in (first, *later.values()):
            p.join(30)
    assert [p.exitcode for p in (first, *later.values())] == [0, 0, 0]
    dest = toolchain.unpacked_dir(tmp_path / "cache", _tc())
    assert (dest / "zig").read_text() == "first\n"
    for who in later:
        assert not (tmp_path / f"{who}-filled").exists(), f"the {who} process filled after waiting"
        said = (tmp_path / f"{who}-log").read_text()
        assert "waiting for another hermetic process that is filling" in said and str(dest) in said
    assert [p.name for p in dest.parent.iterdir()] == [dest.name], "a lock or temp dir left in the cache"
