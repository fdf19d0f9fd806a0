"""SIGINT or SIGTERM to hermetic's own process during a real LLVM build: every process of the build stops
within seconds, the half-built `.new` is removed (as for any failed build), and hermetic exits 130 / 143
saying it was interrupted.

A real `support` build with the host toolchain, interrupted as soon as its compiles run (the source
comes from the shared cache, or through apt once). Costs the configure step twice: about 2 minutes
on 2 cores.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = {"cc1plus", "cc1", "c++", "g++", "gcc", "cc", "clang", "clang++", "as"}


def children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> set[int]:
    tree, found, todo = children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# SIGINT, what `timeout -s INT` and CI runners send; SIGTERM's path is the same, and shown on real ninja in a
# namespace without an LLVM build (tests/integration/test_interrupt_step.py): one real build is enough here.
@pytest.mark.parametrize("sig", [signal.SIGINT], ids=["SIGINT"])
def test_interrupt_during_compiles(tmp_path: Path, source_cache: Path, sig: signal.Signals) -> None:
    work = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    argv = ["nice", "-n", "10", sys.executable, "-m", "hermetic", "build", "llvm", "--variant", "support",
            "--toolchain", "host", "--work-dir", str(work), "--cache", str(source_cache), "--jobs", "2",
            "--offline", "auto"]
    lines: list[str] = []
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
        reader.start()
        deadline = time.monotonic() + 1800
        compiling: set[int] = set()
        while not compiling:
            assert proc.poll() is None, "".join(lines[-40:])
            assert time.monotonic() < deadline, "the build never reached its compiles"
            time.sleep(1)
            if any(re.search(r"compile: \[\d+/\d+\]", line) for line in lines):
                compiling = {p for p in descendants(proc.pid) if name(p) in COMPILERS}
        running = descendants(proc.pid)
        start = time.monotonic()
        os.kill(proc.pid, sig)  # hermetic's own process, not its group
        while any(alive(p) for p in running) and time.monotonic() - start < 60:
            time.sleep(0.1)
        stopped = time.monotonic() - start  # every process of the build gone; removing .new takes longer
        rc = proc.wait(600)
        took = time.monotonic() - start
        reader.join(10)
    left = sorted(p for p in running if alive(p))
    for p in left:  # a failure here leaves no compiler behind
        os.kill(p, signal.SIGKILL)
    err = "".join(lines)
    assert rc == 128 + sig, err[-3000:]
    assert f"interrupted ({sig.name})" in err
    assert "repro:" not in err and "error:" not in err  # an interrupt, not a build failure
    assert not left, f"still running after hermetic exited: {[(p, name(p)) for p in left]}"
    assert stopped < 15, f"the build's processes took {stopped:.1f} s to stop"
    assert not (work / "llvm" / "support" / ".new").exists()
    assert not (work / "llvm" / "support" / "record.json").exists()
    print(f"{sig.name}: {len(compiling)} compilers and {len(running)} processes in all stopped in {stopped:.1f} s; "
          f"hermetic exited after {took:.1f} s (removing the half-built .new)")
