"""Run build steps offline, in a controlled environment, with progress.

Every build step gets a fresh network namespace (`unshare --net`, or with a
user namespace where the caller is not root) so nothing can reach the
network, and a small fixed environment so the host's variables cannot leak
into the bits.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from hermetic.core.errors import EnvironmentError_, OfflineError, SubprocessFailed

_PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]")
# Variables a build may see from the host; everything else is dropped.
_PASS_THROUGH = ("PATH", "HOME", "TMPDIR", "CUDA_HOME", "SSL_CERT_FILE")


@dataclass(frozen=True)
class Offline:
    """How a step was kept off the network; goes into the build record."""

    enforced: bool
    method: str  # "netns", "userns+netns" or "none"
    reason: str

    def as_json(self) -> dict[str, object]:
        return {"enforced": self.enforced, "method": self.method, "reason": self.reason}


@functools.cache
def _probe(argv: tuple[str, ...]) -> bool:
    if shutil.which(argv[0]) is None:
        return False
    try:
        return subprocess.run([*argv, "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


NETNS = ("unshare", "--net", "--")
USERNS = ("unshare", "--user", "--map-root-user", "--net", "--")


def offline_policy(mode: str) -> tuple[Offline, tuple[str, ...]]:
    """The enforcement for `mode` (auto|require|off) and the command prefix that applies it."""
    if mode == "off":
        return Offline(False, "none", "offline enforcement turned off (--offline=off)"), ()
    if _probe(NETNS):
        return Offline(True, "netns", "each step ran in a fresh network namespace (unshare --net)"), NETNS
    if _probe(USERNS):
        return (
            Offline(True, "userns+netns", "each step ran in a fresh user and network namespace"),
            USERNS,
        )
    why = "this machine does not allow `unshare --net` (no CAP_SYS_ADMIN, user namespaces disabled)"
    if mode == "require":
        raise OfflineError(
            "cannot enforce offline builds here",
            why,
            "run as root or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), "
            "or pass --offline=auto to build without enforcement (the record will say so)",
        )
    return Offline(False, "none", why + "; built without enforcement"), ()


def build_env(epoch: int, extra: Mapping[str, str] | None = None, host: Mapping[str, str] | None = None) -> dict[str, str]:
    host = os.environ if host is None else host
    env = {k: host[k] for k in _PASS_THROUGH if k in host}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
            "SOURCE_DATE_EPOCH": str(epoch),
            "PYTHONHASHSEED": "0",
            "ZERO_AR_DATE": "1",
        }
    )
    if extra:
        env.update(extra)
    return env


class Progress:
    """Shows ninja's [n/N] as a running count; quiet mode prints nothing until the end.

    One step may run ninja several times (compile, install, test_package): a count that starts
    again is the next phase, named from `phases` so that 209/209 is not followed by a bare 0/4.
    """

    def __init__(self, label: str, quiet: bool, stream: TextIO | None = None, phases: Sequence[str] = ()) -> None:
        self.label = label
        self.quiet = quiet
        self.stream = stream or sys.stderr  # looked up now: the CLI guards sys.stderr against a closed pipe
        self.tty = self.stream.isatty()
        self.last_pct = -1
        self.last_time = 0.0
        self.phases = tuple(phases)
        self.phase = 0
        self.last = (0, 0)

    @property
    def name(self) -> str:
        if not self.phases:
            return self.label
        what = self.phases[self.phase] if self.phase < len(self.phases) else f"phase {self.phase + 1}"
        return f"{self.label} {what}"

    def line(self, text: str) -> None:
        m = _PROGRESS.match(text)
        if not m or self.quiet:
            return
        n, total = int(m.group(1)), int(m.group(2))
        if self.last != (0, 0) and (total != self.last[1] or n < self.last[0]):
            if self.tty:
                self.stream.write("\n")
            self.phase += 1
            self.last_pct = -1
        self.last = (n, total)
        pct = n * 100 // max(total, 1)
        now = time.monotonic()
        if self.tty:
            self.stream.write(f"\r{self.name}: [{n}/{total}] {pct}%")
            self.stream.flush()
        elif pct != self.last_pct and (now - self.last_time > 10 or n == total or pct // 10 != self.last_pct // 10):
            self.stream.write(f"{self.name}: [{n}/{total}] {pct}%\n")
            self.stream.flush()
            self.last_time = now
        self.last_pct = pct

    def done(self) -> None:
        if self.tty and not self.quiet and self.last_pct >= 0:
            self.stream.write("\n")


def stop(proc: subprocess.Popen[str], grace: float = 5.0) -> None:
    """Stop a step and everything it started in its process group: SIGTERM first (ninja passes it on to
    the compiles it runs in groups of their own, then exits), SIGKILL for what is left after `grace`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; members of its group may linger a moment longer
        deadline = time.monotonic() + grace
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _group_alive(proc.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run(
    argv: Sequence[str],
    *,
    what: str,
    env: Mapping[str, str],
    cwd: Path,
    prefix: Sequence[str] = (),
    log_path: Path | None = None,
    quiet: bool = False,
    label: str = "",
    phases: Sequence[str] = (),
    fix: str = "",
) -> str:
    """Run one step; returns its output. Failure raises SubprocessFailed with a repro line.

    The step runs in a process group of its own, so an interrupt of hermetic (SIGINT, SIGTERM) reaches
    it only through `stop`: the whole group is stopped before the interrupt goes on, and cleanup never
    waits for a build that keeps compiling.
    """
    full = [*prefix, *argv]
    if shutil.which(full[0], path=env.get("PATH")) is None:
        raise EnvironmentError_(f"{full[0]} is not installed", f"needed to {what}", "run the README's set-up command")
    progress = Progress(label or what, quiet, phases=phases)
    chunks: list[str] = []
    log = open(log_path, "a") if log_path else None
    try:
        with subprocess.Popen(
            full,
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            umask=0o022,
            start_new_session=True,
        ) as proc:
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    chunks.append(line)
                    if log:
                        log.write(line)
                    progress.line(line)
                rc = proc.wait()
            except BaseException:
                stop(proc)
                raise
    finally:
        if log:
            log.close()
        progress.done()
    output = "".join(chunks)
    if rc != 0:
        overrides = {k: v for k, v in env.items() if os.environ.get(k) != v}
        if log_path:
            fix = fix or f"the full log is {log_path}"
        raise SubprocessFailed(what, full, rc, output, str(cwd), overrides, fix)
    return output
