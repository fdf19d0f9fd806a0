"""The runner's step loop: each step plans run or skip with its reason, runs with its own log, writes its report part."""

from __future__ import annotations

import enum
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from .options import Options

if TYPE_CHECKING:
    from .bundle import Bundle

SCHEMA = "hermetic.gpu-runner-report/2"


def say(msg: str) -> None:
    """A progress line; device.sh's wait shows the last one that starts with `[runner`."""
    print(f"[runner {time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class State(enum.Enum):
    RUN = "run"  # planned: it runs
    SKIP = "skip"  # planned or found when its turn came: it does not run, and says why
    OK = "ok"  # it ran and passed
    DONE = "done"  # it passed without building: an identical earlier result was still valid
    FAILED = "failed"


@dataclass(frozen=True)
class Decision:
    state: State
    reason: str = ""


def run(reason: str = "") -> Decision:
    return Decision(State.RUN, reason)


def skip(reason: str) -> Decision:
    return Decision(State.SKIP, reason)


class StepFailed(Exception):
    """What failed in a step; rc is the failing command's exit code (1 when no command failed)."""

    def __init__(self, what: str, rc: int = 1) -> None:
        super().__init__(what)
        self.rc = rc


class Report:
    """report.json, rewritten after every change, so that a run cut short (or collected while running) has one."""

    def __init__(self, path: Path | None, data: dict[str, Any]) -> None:
        self.path, self.data = path, {"schema": SCHEMA, **data}  # no path: a dry run, which writes nothing
        self.write()

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.write()

    def merge(self, key: str, part: dict[str, Any]) -> None:
        """One entry more in a mapping several steps fill (variants, golden)."""
        self.data.setdefault(key, {}).update(part)
        self.write()

    def write(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True, default=str) + "\n")
        os.replace(tmp, self.path)


@dataclass
class Context:
    """What every step sees: the options, the checkout, the environment of its commands, the report, and what the
    steps before it produced."""

    opts: Options
    repo: Path
    report: Report
    offline: str  # --offline for every build: require, or auto where no network namespace can be made
    env: dict[str, str]
    python: str = sys.executable
    log: IO[str] | None = None  # the running step's log
    # what earlier steps produced
    site: Path | None = None  # the carried wheels' private target
    bundle: Bundle | None = None  # --bundle's index (read by the bundle step, or by a dry run)
    bundle_source: Path | None = None  # its pruned archive taken out, for the variants it was not made for
    records: dict[str, Any] = field(default_factory=dict)  # step name -> hermetic.record.BuildRecord
    record_paths: dict[str, Path] = field(default_factory=dict)
    ptxas: Path | None = None
    wheel: Path | None = None  # the tilec wheel
    llvmlite_venv: Path | None = None
    baseline_dist: Path | None = None
    rc: int = 0  # the last command's exit code

    @property
    def out(self) -> Path:
        return self.opts.out

    @property
    def work(self) -> Path:
        return self.opts.work

    def sh(self, argv: Sequence[str | Path], *, cwd: Path | None = None, env: dict[str, str] | None = None,
           umask: int = -1, capture: bool = False, stdout: Path | None = None, check: bool = True) -> str:
        """Run one command, its output into the step's log and onto the console (or into the file `stdout`); fail
        the step on a non-zero exit unless not `check`. `capture`: return its stdout (kept off the console)."""
        args = [str(a) for a in argv]
        self.note(f"$ {shlex.join(args)}" + (f"   (in {cwd})" if cwd else ""))
        sink = open(stdout, "w") if stdout else None
        try:
            rc, captured = self._run(args, cwd, self.env if env is None else env, umask, capture, sink)
        finally:
            if sink:
                sink.close()
        self.rc = rc
        if rc != 0 and check:
            raise StepFailed(f"{shlex.join(args[:4])}{' ...' if len(args) > 4 else ''} exited with {rc}", rc)
        return "".join(captured)

    def _run(self, args: list[str], cwd: Path | None, env: dict[str, str], umask: int, capture: bool,
             sink: IO[str] | None) -> tuple[int, list[str]]:
        try:
            proc = subprocess.Popen(args, cwd=cwd, env=env, umask=umask, text=True, errors="replace",
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE if capture else subprocess.STDOUT)
        except OSError as exc:
            raise StepFailed(f"{args[0]} could not be started: {exc}", 127) from exc
        captured: list[str] = []
        with proc:  # its pipes closed, whatever happens
            assert proc.stdout is not None
            if capture:
                assert proc.stderr is not None
                tee = threading.Thread(target=self._tee, args=(proc.stderr, sink))
                tee.start()
                for line in proc.stdout:
                    captured.append(line)
                    self._to_log(line)
                tee.join()
            else:
                self._tee(proc.stdout, sink)
            return proc.wait(), captured

    def _tee(self, stream: IO[str], sink: IO[str] | None) -> None:
        for line in stream:
            if sink:
                sink.write(line)
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
            self._to_log(line)

    def _to_log(self, line: str) -> None:
        if self.log:
            self.log.write(line)
            self.log.flush()

    def note(self, msg: str) -> None:
        """A line of the step's own into its log and onto the console."""
        print(msg, flush=True)
        self._to_log(msg + "\n")

    def hermetic(self, *args: str | Path, cwd: Path | None = None, umask: int = -1,
                 log_to: Path | None = None) -> dict[str, Any]:
        """A `hermetic` command (its CLI is the stable interface), this checkout's sources first; its JSON result.
        `log_to`: its progress into that file rather than onto the console."""
        text = self.sh([self.python, "-m", "hermetic", *map(str, args)], cwd=cwd, umask=umask, capture=True,
                       stdout=log_to)
        try:
            got = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StepFailed(f"hermetic {args[0]} printed no JSON result: {text[-300:]!r}") from exc
        if not isinstance(got, dict):
            raise StepFailed(f"hermetic {args[0]} printed {type(got).__name__}, not an object")
        return got


class Step:
    """One job of the runner. `needs`: the earlier steps that must have passed (ok or done), else it is skipped
    saying which did not."""

    name: ClassVar[str]
    needs: ClassVar[tuple[str, ...]] = ()

    def plan(self, ctx: Context) -> Decision:
        """Run or skip, from the options and what earlier steps produced (in a dry run: nothing yet)."""
        return run()

    def commands(self, ctx: Context) -> list[list[str]]:
        """The main commands it runs, as a dry run shows them."""
        return []

    def run(self, ctx: Context) -> State:
        """Do the work, write its part of the report; OK, or DONE when nothing had to be built."""
        raise NotImplementedError


@dataclass
class Outcome:
    name: str
    state: State
    reason: str = ""
    rc: int | None = None
    wall_s: float | None = None
    cause: Outcome | None = None  # a skip's: the step whose failure or skip it follows from

    def as_json(self) -> dict[str, Any]:
        status = {State.OK: "ok", State.DONE: "done", State.FAILED: "failed", State.SKIP: "skipped"}[self.state]
        out: dict[str, Any] = {"name": self.name, "status": status}
        out |= {k: v for k, v in (("reason", self.reason), ("rc", self.rc), ("wall_s", self.wall_s)) if v not in ("", None)}
        return out


def _blocked(step: Step, done: dict[str, Outcome]) -> Outcome | None:
    """The step that keeps this one from running: the first step it needs that did not pass, traced back to the
    step where the chain began (gpu-tests needs venv, which needs wheel, which --no-wheel skipped: wheel)."""
    for need in step.needs:
        got = done.get(need)
        if got is None:
            return Outcome(need, State.SKIP, "it did not run")
        if got.state in (State.FAILED, State.SKIP):
            return got.cause or got
    return None


def execute(steps: Sequence[Step], ctx: Context, logs: Path,
            on_step: Callable[[list[Outcome]], None] | None = None) -> list[Outcome]:
    """Each step in order: skipped (planned so, or a step it needs did not pass), or run with its own log."""
    done: dict[str, Outcome] = {}
    outcomes: list[Outcome] = []
    logs.mkdir(parents=True, exist_ok=True)
    for step in steps:
        decision = step.plan(ctx)  # its own reason first: "not asked" says more than "a step it needs skipped"
        cause = _blocked(step, done) if decision.state is State.RUN else None
        if cause is not None:
            verb = "failed" if cause.state is State.FAILED else "skipped"
            decision = skip(f"{cause.name} {verb}" + (f" ({cause.reason})" if cause.state is State.SKIP else ""))
        if decision.state is State.SKIP:
            outcome = Outcome(step.name, State.SKIP, decision.reason, cause=cause)
            say(f"step {step.name}: skipped ({decision.reason})")
        else:
            outcome = _run_one(step, ctx, logs / f"{step.name}.log")
        done[step.name] = outcome
        outcomes.append(outcome)
        if on_step:
            on_step(outcomes)
    return outcomes


def _run_one(step: Step, ctx: Context, log_path: Path) -> Outcome:
    say(f"step {step.name}: start")
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        ctx.log = log
        try:
            state, rc, reason = step.run(ctx), 0, ""
        except StepFailed as exc:
            state, rc, reason = State.FAILED, exc.rc, str(exc)
            ctx.note(f"step {step.name} failed: {exc}")
        except Exception as exc:  # a defect of the runner fails its step, never the report
            state, rc, reason = State.FAILED, 1, f"{type(exc).__name__}: {exc}"
            import traceback

            ctx.note(traceback.format_exc())
        finally:
            ctx.log = None
    wall = round(time.monotonic() - t0, 1)
    say(f"step {step.name}: {state.value} (rc {rc}, {wall}s)" + (f": {reason}" if reason else ""))
    return Outcome(step.name, state, reason, rc, wall)


def render(steps: Sequence[Step], ctx: Context) -> str:
    """The plan a dry run prints: every step, run or skip with its reason, and its commands."""
    lines = ["plan:"]
    skipped: dict[str, str] = {}
    for i, step in enumerate(steps, 1):
        d = step.plan(ctx)
        blocked = next((skipped[n] for n in step.needs if n in skipped), "") if d.state is State.RUN else ""
        d = skip(blocked) if blocked else d
        if d.state is State.SKIP:
            skipped[step.name] = blocked or f"{step.name} skipped ({d.reason})"
        lines.append(f"  {i:2}. [{d.state.value:<4}] {step.name:<16} {d.reason}".rstrip())
        if d.state is State.RUN:
            lines += [f"        $ {shlex.join(c)}" for c in step.commands(ctx)]
    return "\n".join(lines)
