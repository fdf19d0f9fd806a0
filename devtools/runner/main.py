"""`python3 -m devtools.runner`: the GPU runner's steps in order, OUT/report.json written as they go, OUT/done last."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from . import bundle, facts
from .core import Context, Outcome, Report, State, Step, StepFailed, execute, now, render, say
from .options import Options, UsageError, resolve, shown
from .steps_bench import BenchToolchain, BuildHost, ColdAb, CompareHost, Scale, ScaleTools, TilecBench
from .steps_llvm import BuildLlvm, BuildSupport, Golden, InstallQemu, InstallWheels, OpenBundle, Pack, Ptxas
from .steps_sign import Image, Sign
from .steps_wheel import PROBE, GpuTests, LlvmliteTests, NumbaSmoke, Venv, Wheel, WheelAgain

REPO = Path(__file__).resolve().parents[2]

STEPS: tuple[type[Step], ...] = (
    InstallWheels, InstallQemu, OpenBundle, ScaleTools, Scale, BuildSupport, BuildLlvm, Golden, Ptxas, Wheel, Venv, GpuTests,
    LlvmliteTests, NumbaSmoke, Pack, Image, Sign, WheelAgain, TilecBench, ColdAb, BuildHost, CompareHost, BenchToolchain,
)

# Every key of report.json, null until a step fills it: the report has one shape whatever ran.
REPORT_KEYS = (
    "started", "finished", "result", "exit_code", "failures", "commit", "options", "machine", "versions", "jobs",
    "offline", "steps", "step_wall_s", "bundle", "source", "toolchain", "wheelhouse", "llvm_version", "carried_wheels",
    "llvm", "llvm_support", "variants", "golden", "ptxas_check", "wheel", "venv", "tests", "gpu_tier",
    "install_tree_archive", "wheel_again", "llvmlite_wheel", "llvmlite_tests", "numba_smoke", "tilec_bench", "cold_ab",
    "compare_host", "bench_toolchain", "bench_cross", "scale", "second_builder",
)

# What an earlier run left in OUT and this one writes again (nothing else there is removed).
OUTPUTS = ("done", "report.json", "junit.xml", "*.whl", "*.whl.cdx.json", "*.whl.intoto.json", "wheel-record.json",
           "record.json", "support-record.json", "host-record.json", "*.ptx", "ptxas.txt", "toolchain-build-*.json",
           "cross-build-*.json", "llvmlite-*", "wheel-again.json", "tilec-bench", "cold-*", "scale-*.json",
           "llvm-*-install.tar.xz.part-*", "llvm-*-install.parts.sha256", "signed", "evidence", "lookaside")


def commit(opts: Options, repo: Path = REPO) -> str:
    """--commit, else HEAD, marked `+changes` where the tree is not HEAD's: a device's copy of the checkout carries
    the working tree but not always its history, and a report must not name a commit it did not run."""
    if opts.commit:
        return opts.commit
    try:
        git = ["git", "-C", str(repo)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+changes" if changed.strip() else head


def start_facts(opts: Options, offline: str, fallback: str | None) -> dict[str, Any]:
    return dict.fromkeys(REPORT_KEYS) | {
        "started": now(), "commit": commit(opts), "options": shown(opts), "machine": facts.machine(), "jobs": opts.jobs,
        "offline": {"requested": offline, "fallback": fallback},
        "source": facts.source(opts.source) if opts.bundle is None else None,
        "bundle": {"dir": str(opts.bundle)} if opts.bundle else None,
        "toolchain": {"requested": opts.toolchain, "mirror": str(opts.mirror) if opts.mirror else None,
                      "mirror_slim": facts.mirror_slim(opts.mirror)},
        "wheelhouse": str(opts.wheelhouse) if opts.wheelhouse else None, "llvm_version": opts.llvm_version,
        "steps": [], "step_wall_s": {}, "variants": {}, "golden": {},
    }


def context(opts: Options, report: Report, offline: str) -> Context:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
    return Context(opts, REPO, report, offline, env)


def clear_outputs(out: Path) -> None:
    for pattern in OUTPUTS:
        for path in out.glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def record_steps(report: Report, outcomes: list[Outcome]) -> None:
    report.data["steps"] = [o.as_json() for o in outcomes]
    report.set("step_wall_s", {o.name: o.wall_s for o in outcomes})


def failures(outcomes: list[Outcome], logs: Path) -> list[dict[str, Any]]:
    out = []
    for o in outcomes:
        if o.state is State.FAILED:
            log = logs / f"{o.name}.log"
            tail = log.read_text(errors="replace").splitlines()[-40:] if log.is_file() else []
            out.append({"step": o.name, "rc": o.rc, "why": o.reason, "output_tail": tail})
    return out


def finish(ctx: Context, outcomes: list[Outcome], rc: int) -> None:
    report, logs = ctx.report, ctx.work / "logs"
    gpu = next((o for o in outcomes if o.name == GpuTests.name), None)
    venv_python = ctx.work / "venv" / "bin" / "python"
    versions = facts.tool_versions(ctx.python, ctx.env, ctx.ptxas) | {
        "git_commit": report.data["commit"],
        "host_python": facts.probe(ctx.python, PROBE),
        "venv": facts.probe(venv_python, PROBE) if venv_python.exists() else None,
        "llvm": ctx.records["build-llvm"].recipe.version if "build-llvm" in ctx.records else None,
    }
    versions |= {"tilec": (versions["venv"] or {}).get("tilec"),
                 "python": (versions["venv"] or versions["host_python"] or {}).get("python")}
    # a bundle feeds a cache of its own in each work dir it is built in
    caches = [ctx.work / "cache", *sorted(ctx.work.glob("hermetic/bundle/*/cache"))]
    report.data["toolchain"] = {**report.data["toolchain"],
                                "unpacked": [t for c in caches for t in facts.unpacked_toolchains(c)]}
    report.data |= {
        "finished": now(), "result": "passed" if rc == 0 else "failed", "exit_code": rc,
        "failures": failures(outcomes, logs), "versions": versions,
        "gpu_tier": {"status": gpu.as_json()["status"] if gpu else None, "reason": gpu.reason if gpu else None},
    }
    report.write()


def dry_bundle(ctx: Context) -> str:
    """What a dry run says of --bundle: its name, manifest digest and plan, read from its index (not yet checked)."""
    assert ctx.opts.bundle is not None
    try:
        b = ctx.bundle = bundle.read(ctx.opts.bundle)
    except StepFailed as exc:
        return f"{ctx.opts.bundle}: cannot be read ({exc})"
    return (f"{b.path}: {b.name} {b.digest}, {b.inputs} inputs, {b.size / 1e6:.1f} MB, made for {b.variant} "
            f"(build inputs digest {b.build_inputs_digest})")


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # through the finally below: the report and `done` are still written


def main(argv: Sequence[str] | None = None) -> int:
    try:
        opts = resolve(sys.argv[1:] if argv is None else argv, os.environ, REPO)
    except UsageError as exc:
        print(f"runner: {exc.what}\n  fix: {exc.fix}", file=sys.stderr)
        return 2
    steps = [cls() for cls in STEPS]
    offline, fallback = facts.offline_mode()
    if opts.dry_run:
        ctx = context(opts, Report(None, {}), offline)
        print(f"offline: {offline}" + (f" ({fallback})" if fallback else ""))
        if opts.bundle is not None:
            print(f"bundle: {dry_bundle(ctx)}")
        print(render(steps, ctx))
        return 0
    for d in (opts.out, opts.work):
        d.mkdir(parents=True, exist_ok=True)
    clear_outputs(opts.out)
    ctx = context(opts, Report(opts.out / "report.json", start_facts(opts, offline, fallback)), offline)
    if fallback:
        say(f"WARNING: {fallback}")
    say(f"repo {REPO}, out {opts.out}, work {opts.work}, jobs {opts.jobs}, "
        + (f"bundle {opts.bundle}" if opts.bundle else f"source {opts.source}"))
    signal.signal(signal.SIGTERM, _terminated)
    outcomes: list[Outcome] = []

    def on_step(got: list[Outcome]) -> None:
        outcomes[:] = got  # what has run so far, for the report of a run cut short
        record_steps(ctx.report, got)

    rc = 1
    try:
        execute(steps, ctx, opts.work / "logs", on_step=on_step)
        rc = 1 if any(o.state is State.FAILED for o in outcomes) else 0
    finally:
        try:
            finish(ctx, outcomes, rc)
            say(f"wrote {opts.out / 'report.json'}")
        except Exception as exc:  # the report is the one thing always written; say why it is not
            print(f"runner: writing the report failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            rc = rc or 3
        (opts.out / "done").write_text(f"{rc}\n")
        say(f"done (exit {rc})")
    return rc
