"""The runner's measuring steps: tilec's benches, cold compiles of two wheels in turns, the toolchain and scale benches."""

from __future__ import annotations

import json
import os
import platform
import shutil
from pathlib import Path

from . import cold
from .core import Context, Decision, State, Step, StepFailed, run, skip
from .facts import gpus
from .records import build_record, llvm_summary
from .steps_llvm import build_args, no_bundle
from .steps_wheel import build_wheel, no_pythonpath


def bench_env(ctx: Context, **extra: str) -> dict[str, str]:
    """The benches' environment: tilec from the wheel only, this run's ptxas."""
    return no_pythonpath(ctx, **({"TILEC_PTXAS": str(ctx.ptxas)} if ctx.ptxas else {}), **extra)


def baseline_wheel(ctx: Context) -> Path:
    """The baseline tilec (--baseline-src) built against the same tree, once per run."""
    if ctx.baseline_dist is None:
        assert ctx.opts.baseline_src is not None
        log = ctx.out / "tilec-bench" / "baseline-wheel.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        build_wheel(ctx, ctx.work / "baseline-dist", ctx.work / "baseline-hw", ctx.records["build-llvm"].install_dir,
                    project=ctx.opts.baseline_src, log_to=log)
        ctx.baseline_dist = ctx.work / "baseline-dist"
    return ctx.baseline_dist


class TilecBench(Step):
    """bench/tilec_gpu.sh with the wheel: tilec against Triton and raw cuda-python, the baseline's hits beside."""

    name = "tilec-bench"
    needs = ("wheel",)

    def plan(self, ctx: Context) -> Decision:
        return run() if ctx.opts.tilec_bench else skip("not asked (--tilec-bench)")

    def run(self, ctx: Context) -> State:
        assert ctx.wheel is not None
        out = ctx.out / "tilec-bench"
        out.mkdir(parents=True, exist_ok=True)
        extra = {"OUT": str(out), "BENCH_COMMIT": str(ctx.report.data.get("commit")),
                 "TILEC_CACHE_DIR": str(ctx.work / "tilec-bench-cache")}
        if ctx.opts.baseline_src:
            # its warm hits are measured beside this wheel's, fresh processes taking turns
            extra |= {"TILEC_BENCH_BASELINE": str(baseline_wheel(ctx)),
                      "TILEC_BENCH_FRESH": os.environ.get("TILEC_BENCH_FRESH", "11")}
        try:
            ctx.sh(["bash", "bench/tilec_gpu.sh", ctx.wheel.parent], cwd=ctx.repo, env=bench_env(ctx, **extra))
        finally:
            ctx.report.set("tilec_bench", sorted(p.name for p in out.iterdir()))
        return State.OK


def cold_site(ctx: Context, name: str, wheel_dir: Path) -> None:
    """That wheel installed into a private target, for the cold-compile rounds."""
    wheels = sorted(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise StepFailed(f"expected one wheel in {wheel_dir}, found {len(wheels)}")
    site = ctx.work / f"cold-{name}" / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    ctx.sh([ctx.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", site,
            wheels[0]])


def cold_rounds(ctx: Context, a: str, b: str) -> None:
    """The two wheels' cold compiles take turns (a, b; then b, a; ...), so that a slow stretch of the machine falls
    on both: one wheel after the other gave ratios from 0.78 to 1.10 on three kernels."""
    for r in range(1, ctx.opts.cold_rounds + 1):
        for name in (a, b) if r % 2 else (b, a):
            ctx.sh([ctx.python, "-m", "bench.tilec_compile", "--only", "cold", "--reps", str(ctx.opts.cold_reps),
                    "--out", ctx.out / f"cold-{name}" / f"round-{r}"], cwd=ctx.repo,
                   env=bench_env(ctx, PYTHONPATH=str(ctx.work / f"cold-{name}" / "site"),
                                 TILEC_CACHE_DIR=str(ctx.work / f"cold-{name}" / "cache")))


class ColdAb(Step):
    """This wheel's cold compile beside the baseline's (--baseline-src), taking turns: a before/after on one machine."""

    name = "cold-ab"
    needs = ("wheel",)

    def plan(self, ctx: Context) -> Decision:
        return run() if ctx.opts.cold_ab else skip("not asked (--cold-ab)")

    def run(self, ctx: Context) -> State:
        assert ctx.wheel is not None
        cold_site(ctx, "this", ctx.wheel.parent)
        cold_site(ctx, "baseline", baseline_wheel(ctx))
        try:
            cold_rounds(ctx, "this", "baseline")
        finally:
            ctx.report.set("cold_ab", cold.cold_ab(ctx.out))
        return State.OK


class BuildHost(Step):
    """The variant again with the host compiler, timed beside the pinned toolchain's build."""

    name = "build-host"
    needs = ("install-wheels",)

    def plan(self, ctx: Context) -> Decision:
        if ctx.opts.scale:
            return skip("--scale: the scale bench instead of the builds")
        return (no_bundle(ctx) or run()) if ctx.opts.compare_host else skip("not asked (--compare-host)")

    def commands(self, ctx: Context) -> list[list[str]]:
        return [["hermetic", *build_args(ctx, ctx.opts.variant, ctx.work / "host", toolchain=["--toolchain", "host"])]]

    def run(self, ctx: Context) -> State:
        got = ctx.hermetic(*build_args(ctx, ctx.opts.variant, ctx.work / "host", toolchain=["--toolchain", "host"]))
        shutil.copyfile(got["record"], ctx.out / "host-record.json")
        ctx.records[self.name] = build_record(Path(got["record"]))
        return State.OK


class CompareHost(Step):
    """tilec's wheel against the host compiler's tree, and tilec's cold compile with each wheel, taking turns."""

    name = "compare-host"
    needs = ("build-host", "wheel")

    def plan(self, ctx: Context) -> Decision:
        return run() if ctx.opts.compare_host else skip("not asked (--compare-host)")

    def run(self, ctx: Context) -> State:
        assert ctx.wheel is not None
        pinned, host = ctx.records["build-llvm"], ctx.records["build-host"]
        name = pinned.toolchain_ref.name
        build_wheel(ctx, ctx.work / "dist-host", ctx.work / "host", host.install_dir, toolchain=["--toolchain", "host"])
        cold_site(ctx, name, ctx.wheel.parent)
        cold_site(ctx, "host", ctx.work / "dist-host")
        try:
            cold_rounds(ctx, name, "host")
        finally:
            ctx.report.set("compare_host", cold.compare_host(ctx.out, llvm_summary(pinned), llvm_summary(host), name))
        return State.OK


class BenchToolchain(Step):
    """Last, bench/toolchain_build.py: the bench variant built two ways side by side (toolchains, or native/cross)."""

    name = "bench-toolchain"
    needs = ("install-wheels",)

    def plan(self, ctx: Context) -> Decision:
        if not ctx.opts.bench:
            return skip("not asked (--bench)")
        return skip("--scale: the scale bench instead of the builds") if ctx.opts.scale else run()

    def commands(self, ctx: Context) -> list[list[str]]:
        o = ctx.opts
        return [[ctx.python, "-m", "bench.toolchain_build", "--compare", o.bench_compare, "--variant", o.bench_variant,
                 "--source", str(o.source), "--jobs", str(o.jobs), "--out", str(ctx.out), "--base", str(ctx.work / "bench"),
                 "--cache", str(ctx.work / "cache"), *(["--mirror", str(o.mirror)] if o.mirror else []),
                 *(["--wheelhouse", str(o.wheelhouse)] if o.wheelhouse else []), "--offline", ctx.offline,
                 "--no-urls", "--no-apt"]]

    def run(self, ctx: Context) -> State:
        shutil.rmtree(ctx.work / "bench", ignore_errors=True)
        ctx.sh(self.commands(ctx)[0], cwd=ctx.repo)
        key, pattern = ("bench_cross", "cross-build-*.json") if ctx.opts.bench_compare == "arch" else (
            "bench_toolchain", "toolchain-build-*.json")
        found = sorted(ctx.out.glob(pattern))
        ctx.report.set(key, json.loads(found[0].read_text()) if found else None)
        return State.OK


SCALE_TOOLS = ("redis-server", "ccache", "distcc", "distccd", "docker-registry")


class ScaleTools(Step):
    """What the scale bench starts: the carried Debian binaries (scale-carry.sh) unpacked and first on PATH, or the
    machine's own; each says its version."""

    name = "scale-tools"

    def plan(self, ctx: Context) -> Decision:
        return run() if ctx.opts.scale else skip("not asked (--scale)")

    def run(self, ctx: Context) -> State:
        if ctx.opts.scale_tools is not None:
            tarball = ctx.opts.scale_tools / "scale-tools.tar.xz"
            if not tarball.is_file():
                raise StepFailed(f"no scale-tools.tar.xz in {ctx.opts.scale_tools}: tests/gpu/runner/scale-carry.sh "
                                 "writes it")
            dest = ctx.work / "scale-tools"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            ctx.sh(["tar", "-C", dest, "-xJf", tarball])
            for d in (ctx.work, dest):
                d.chmod(0o755)  # the other user runs ccache from here
            ctx.note((dest / "versions.txt").read_text().strip())
            ctx.env["PATH"] = f"{dest / 'bin'}{os.pathsep}{ctx.env['PATH']}"
        for tool in SCALE_TOOLS:
            found = shutil.which(tool, path=ctx.env["PATH"])
            if found is None:
                raise StepFailed(f"{tool} is not on PATH: carry it with --scale-tools (tests/gpu/runner/scale-carry.sh)")
            ctx.sh([found, "--version"], check=False)
        return State.OK


class Scale(Step):
    """bench/scale_bench.py on the variant, every build offline from the carried archive, toolchain and wheelhouse."""

    name = "scale"
    needs = ("install-wheels", "scale-tools")

    def plan(self, ctx: Context) -> Decision:
        return run() if ctx.opts.scale else skip("not asked (--scale)")

    def run(self, ctx: Context) -> State:
        o = ctx.opts
        for d in (ctx.work, ctx.out):
            d.chmod(0o755)
        gpu = (gpus() or [{"name": "no GPU found"}])[0]["name"]
        machine = f"GPU runner ({gpu}), {os.cpu_count()} cores, {platform.platform()}; nothing else ran on it"
        shutil.rmtree(ctx.work / "scale", ignore_errors=True)
        report = ctx.out / f"scale-{o.variant}.json"
        argv: list[str | Path | None] = [ctx.python, "-m", "bench.scale_bench", "--variant", o.variant, "--jobs", str(o.jobs),
                "--hosts", str(o.scale_hosts), "--slots", str(o.scale_slots or max(1, o.jobs // 2)),
                "--machine", machine, "--base", ctx.work / "scale", "--json", report, "--source", o.source,
                "--offline", ctx.offline, "--no-downloads", "--keep-build", "--keep",
                *(["--toolchain", o.toolchain] if o.toolchain else []), *(["--mirror", str(o.mirror)] if o.mirror else []),
                *(["--wheelhouse", str(o.wheelhouse)] if o.wheelhouse else []),
                *(["--runs", o.scale_runs] if o.scale_runs else [])]
        try:
            ctx.sh([a for a in argv if a is not None], cwd=ctx.repo, env=ctx.env | {"HERMETIC_CACHE": str(ctx.work / "cache"), "PYTHONUNBUFFERED": "1"})
        finally:
            if report.is_file():
                got = json.loads(report.read_text())
                ctx.report.set("scale", {"report": report.name, **{k: got.get(k) for k in (
                    "complete", "missing", "tree_digest", "tree_digests_identical", "summary")}})
        return State.OK
