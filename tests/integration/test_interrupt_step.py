"""An interrupt of hermetic stops a build step and everything it started, within seconds.

Real parts, no LLVM: ninja in a fresh network namespace (`unshare --net`, as builds run) with four jobs
that would sleep for ten minutes, each in a process group of its own (ninja's way); a driver runs it with
`sandbox.run` under the CLI's own signal handling. The whole CLI on a real LLVM build is
tests/functional/test_interrupt_build.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = """
import os, sys
from pathlib import Path
from hermetic.build import sandbox
from hermetic.__main__ import process_edges

work = Path(sys.argv[1])
with process_edges():
    try:
        offline, prefix = sandbox.offline_policy("require")
        sandbox.run(["ninja", "-j4"], what="sleep in ninja", env=sandbox.build_env(0), cwd=work, prefix=prefix,
                    log_path=work / "log", label="sleep")
    except KeyboardInterrupt as exc:
        print("interrupted", getattr(exc, "signum", 2), file=sys.stderr, flush=True)
        sys.exit(128 + getattr(exc, "signum", 2))
"""
NINJA = """rule sleep
  command = sh -c 'echo $$$$ > $out.pid; exec sleep 600'
build a: sleep
build b: sleep
build c: sleep
build d: sleep
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_hermetic_stops_ninja_and_its_jobs(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "build.ninja").write_text(NINJA)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], env=env, stderr=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stderr is not None
        pids = [tmp_path / f"{n}.pid" for n in "abcd"]
        deadline = time.monotonic() + 60
        while not all(p.is_file() and p.read_text().strip() for p in pids):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the four jobs did not start"
            time.sleep(0.05)
        jobs = [int(p.read_text()) for p in pids]
        assert all(alive(j) for j in jobs)
        start = time.monotonic()
        os.kill(proc.pid, sig)  # hermetic's own process only, as `timeout -s INT` and CI runners send it
        rc = proc.wait(30)
        took = time.monotonic() - start
        err = proc.stderr.read()
    assert rc == 128 + sig, err
    assert f"interrupted {int(sig)}" in err
    time.sleep(0.2)
    left = [j for j in jobs if alive(j)]
    for j in left:  # so that a failure here leaves no sleeping jobs behind
        os.kill(j, signal.SIGKILL)
    assert not left, "jobs of the step outlived hermetic"
    assert took < 10, f"stopping took {took:.1f} s"
