"""The runner's wheel steps: tilec's wheel (and again), a fresh venv, the gpu tier, llvmlite's wheel and suite, Numba."""

from __future__ import annotations

import hashlib
import json
import shutil
import site
import sysconfig
import time
from pathlib import Path

from devtools import unittest_summary

from .core import Context, Decision, State, Step, StepFailed, run, skip
from .facts import gpus, here_arch, junit
from .records import wheel_record, wheel_summary
from .steps_llvm import foreign, toolchain_args

PROBE = Path(__file__).resolve().parents[2] / "tests" / "gpu" / "runner" / "venv_probe.py"
NUMBA_SMOKE = PROBE.with_name("numba_smoke.py")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def no_pythonpath(ctx: Context, **extra: str) -> dict[str, str]:
    """The environment of a venv's own Python: nothing of this checkout's or the carried wheels' on its path."""
    return {k: v for k, v in ctx.env.items() if k != "PYTHONPATH"} | extra


def wheel_inputs(ctx: Context) -> list[str]:
    """Where a wheel's build requirements come from: the bundle, or the carried wheelhouse."""
    if ctx.opts.bundle is not None:
        return ["--bundle", str(ctx.opts.bundle)]
    return ["--wheelhouse", str(ctx.opts.wheelhouse)] if ctx.opts.wheelhouse else []


def bundle_s_compiler(ctx: Context) -> bool:
    """Whether tilec's wheel is the bundle's own src/compiler (a bundle, without --checkout-compiler)."""
    return ctx.opts.bundle is not None and not ctx.opts.checkout_compiler


def wheel_args(ctx: Context, prefix: Path, dist: Path, work_dir: Path, project: Path | None = None,
               toolchain: list[str] | None = None) -> list[str]:
    """`hermetic wheel` of tilec against `prefix`: from a bundle, the bundle's own src/compiler (no PROJECT) unless
    --checkout-compiler; else the checkout's; `project` another tilec (the baseline)."""
    where = [str(project)] if project else [] if bundle_s_compiler(ctx) else [str(ctx.repo / "src" / "compiler")]
    return ["wheel", *where, "--llvm", str(prefix), "--output", str(dist),
            "--offline", ctx.offline, "--work-dir", str(work_dir), "--cache", str(ctx.work / "cache"),
            "--jobs", str(ctx.opts.jobs), *wheel_inputs(ctx), *(toolchain_args(ctx) if toolchain is None else toolchain)]


def build_wheel(ctx: Context, dist: Path, work_dir: Path, prefix: Path, *, project: Path | None = None,
                toolchain: list[str] | None = None, cwd: Path | None = None, umask: int = -1,
                log_to: Path | None = None) -> Path:
    """`hermetic wheel` of tilec (or `project`) against `prefix` into a fresh `dist`; the wheel's path."""
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    try:
        got = ctx.hermetic(*wheel_args(ctx, prefix, dist, work_dir, project, toolchain), cwd=cwd, umask=umask,
                           log_to=log_to)
    except StepFailed:
        log = work_dir / "wheel" / "build.log"
        for line in (log.read_text(errors="replace").splitlines()[-60:] if log.is_file() else []):
            ctx.note(f"  wheel build.log: {line}")
        raise
    return Path(got["path"])


class Wheel(Step):
    """tilec's wheel against the variant's tree, offline and reproducibly (`hermetic wheel`)."""

    name = "wheel"
    needs = ("build-llvm",)

    def plan(self, ctx: Context) -> Decision:
        if not ctx.opts.wheel:
            return skip("--no-wheel")
        if foreign(ctx):
            return skip(f"an {ctx.opts.arch} tree: its wheel would not run on this {here_arch()} machine")
        return run()

    def commands(self, ctx: Context) -> list[list[str]]:
        return [["hermetic", *wheel_args(ctx, Path("PREFIX"), ctx.work / "dist", ctx.work / "hermetic")]]

    def run(self, ctx: Context) -> State:
        prefix = ctx.records["build-llvm"].install_dir
        path = build_wheel(ctx, ctx.work / "dist", ctx.work / "hermetic", prefix)
        rec = wheel_record(path.parent / "wheel-record.json")
        shutil.copyfile(path, ctx.out / path.name)
        shutil.copyfile(path.parent / "wheel-record.json", ctx.out / "wheel-record.json")
        ctx.wheel = path
        summary = wheel_summary(path, rec, sha256(path))
        # a bundle's own compiler or this checkout's: a run meant to test a compiler change says which it built
        summary["compiler"] = "the bundle's src/compiler" if bundle_s_compiler(ctx) else "the checkout's src/compiler"
        ctx.report.set("wheel", summary)
        return State.OK


def parent_packages(ctx: Context, venv: Path) -> None:
    """Where the runner's Python is itself a venv (the CUDA image's is), --system-site-packages reaches the base
    interpreter's packages, not those beside torch: a .pth names them, after the venv's own. (The venv scheme is
    where `python -m venv` puts them, whatever this interpreter's default scheme: Debian's is posix_local.)"""
    purelib = Path(sysconfig.get_path("purelib", scheme="venv", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "zz_runner_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def make_venv(ctx: Context, venv: Path, wheel: Path) -> None:
    """A fresh venv seeing the machine's packages, `wheel` installed into it from the file only."""
    shutil.rmtree(venv, ignore_errors=True)
    ctx.sh([ctx.python, "-m", "venv", "--system-site-packages", venv], check=False)
    with_pip = ctx.rc == 0
    if not with_pip:
        shutil.rmtree(venv, ignore_errors=True)
        ctx.sh([ctx.python, "-m", "venv", "--without-pip", "--system-site-packages", venv])
    parent_packages(ctx, venv)
    python = venv / "bin" / "python"
    pip: list[str | Path] = [python, "-m", "pip"] if with_pip else [ctx.python, "-m", "pip", "--python", python]
    ctx.sh([*pip, "install", "-q", "--no-index", "--no-deps", "--no-cache-dir", "--force-reinstall", wheel])


def has_device() -> bool:
    return bool(gpus()) or Path("/dev/nvidia0").exists()


class Venv(Step):
    """The wheel in a fresh venv: tilec imports from it, and so does what the gpu tier needs."""

    name = "venv"
    needs = ("wheel",)

    def run(self, ctx: Context) -> State:
        assert ctx.wheel is not None
        venv = ctx.work / "venv"
        make_venv(ctx, venv, ctx.wheel)
        modules = ["tilec", "llvmlite", "numpy", "pytest", *(["torch", "cuda.bindings"] if has_device() else [])]
        text = ctx.sh([venv / "bin" / "python", PROBE, *modules], cwd=Path("/"), env=no_pythonpath(ctx), capture=True,
                      check=False)
        got = json.loads(text.splitlines()[-1]) if text.strip() else {}
        ctx.report.set("venv", got)
        if ctx.rc != 0 or not got:
            raise StepFailed(f"the venv does not import {', '.join(got.get('missing') or modules)}")
        tilec_file = Path(str(got.get("tilec.__file__")))
        if not tilec_file.resolve().is_relative_to(venv.resolve()):
            raise StepFailed(f"tilec imports from {tilec_file}, not from the venv {venv}")
        return State.OK


class GpuTests(Step):
    """The gpu tier with the venv's tilec only (pytest from the checkout's root, for its markers and settings)."""

    name = "gpu-tests"
    needs = ("venv",)

    def plan(self, ctx: Context) -> Decision:
        if not has_device():
            return skip("no CUDA device on this machine (nvidia-smi lists none, no /dev/nvidia0): the gpu tier needs one")
        return run()

    def run(self, ctx: Context) -> State:
        xml = ctx.out / "junit.xml"
        env = no_pythonpath(ctx, TILEC_TEST_INSTALLED="1", TILEC_CACHE_DIR=str(ctx.work / "tilec-cache"),
                            **({"TILEC_PTXAS": str(ctx.ptxas)} if ctx.ptxas else {}))
        try:
            ctx.sh([ctx.work / "venv" / "bin" / "python", "-m", "pytest", "tests/gpu", "-m", "gpu", "-p", "no:cacheprovider",
                    "-v", "-rA", f"--junitxml={xml}"], cwd=ctx.repo, env=env)
        finally:
            ctx.report.set("tests", junit(xml))
        tests = ctx.report.data["tests"] or {}
        if not tests.get("passed"):
            # on a GPU runner a tier that only skipped has not tested anything
            raise StepFailed(f"no gpu test passed ({tests.get('total', 0)} collected): is the CUDA device usable?")
        return State.OK


class WheelAgain(Step):
    """The same wheel built again in another work dir, cwd and umask (077): the same sha256 required."""

    name = "wheel-again"
    needs = ("wheel",)

    def plan(self, ctx: Context) -> Decision:
        return run() if ctx.opts.again else skip("not asked (--again)")

    def run(self, ctx: Context) -> State:
        assert ctx.wheel is not None
        base = ctx.work / "again"
        (base / "cwd").mkdir(parents=True, exist_ok=True)
        second = build_wheel(ctx, base / "dist", base / "hermetic", ctx.records["build-llvm"].install_dir,
                             cwd=base / "cwd", umask=0o077)
        first_sha, second_sha = sha256(ctx.wheel), sha256(second)
        report = {
            "first": {"file": ctx.wheel.name, "sha256": first_sha, "how": "the wheel step: umask 022, its work dir"},
            "second": {"file": second.name, "sha256": second_sha, "how": "umask 077, another cwd and --work-dir"},
            "identical": first_sha == second_sha,
        }
        (ctx.out / "wheel-again.json").write_text(json.dumps(report, indent=2) + "\n")
        ctx.report.set("wheel_again", report)
        if first_sha != second_sha:
            raise StepFailed(f"the second wheel differs: {first_sha} against {second_sha}")
        return State.OK


class LlvmliteTests(Step):
    """llvmlite's wheel by `hermetic wheel --recipe llvmlite` against the tree, twice (two work dirs, cwds, umasks;
    the same sha256 required), the first in a fresh venv running llvmlite's own test suite."""

    name = "llvmlite-tests"
    needs = ("build-llvm",)

    def plan(self, ctx: Context) -> Decision:
        if ctx.opts.llvmlite is None:
            return skip("not asked (--llvmlite SDIST)")
        return skip(f"an {ctx.opts.arch} tree does not run here") if foreign(ctx) else run()

    def _wheel(self, ctx: Context, n: int) -> tuple[Path, float]:
        assert ctx.opts.llvmlite is not None
        dist, cwd = ctx.work / f"llvmlite-dist{n}", ctx.work / f"llvmlite-cwd{n}"
        shutil.rmtree(dist, ignore_errors=True)
        shutil.rmtree(ctx.work / f"llvmlite-w{n}", ignore_errors=True)
        dist.mkdir(parents=True)
        cwd.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        got = ctx.hermetic(
            "wheel", "--recipe", "llvmlite", "--root", ctx.repo, "--llvm", ctx.records["build-llvm"].install_dir,
            "--output", dist, "--offline", ctx.offline, "--work-dir", ctx.work / f"llvmlite-w{n}",
            "--cache", ctx.work / "cache", "--jobs", str(ctx.opts.jobs), "--no-urls", *toolchain_args(ctx),
            *wheel_inputs(ctx), *(["--llvm-version", ctx.opts.llvm_version] if ctx.opts.llvm_version else []),
            "--mirror", ctx.opts.llvmlite.parent,  # where the sdist is admitted from, by its pinned sha256
            cwd=cwd, umask=0o022 if n == 1 else 0o077, log_to=ctx.out / f"llvmlite-build-{n}.log")
        return Path(got["path"]), round(time.monotonic() - t0)

    def run(self, ctx: Context) -> State:
        sdist = ctx.opts.llvmlite
        assert sdist is not None
        if not sdist.is_file():
            raise StepFailed(f"no llvmlite sdist at {sdist}")
        (first, s1), (second, s2) = self._wheel(ctx, 1), self._wheel(ctx, 2)
        for f in (first, first.with_name(first.name + ".cdx.json"), first.with_name(first.name + ".intoto.json")):
            shutil.copyfile(f, ctx.out / f.name)
        shutil.copyfile(first.parent / "wheel-record.json", ctx.out / "llvmlite-wheel-record.json")
        shutil.copyfile(second.parent / "wheel-record.json", ctx.out / "llvmlite-wheel-record-2.json")
        ctx.report.set("llvmlite_wheel", {
            "builds": [{"wheel": f"{w.name} sha256:{sha256(w)}", "seconds": s} for w, s in ((first, s1), (second, s2))],
            "record": json.loads((first.parent / "wheel-record.json").read_text())})
        if sha256(first) != sha256(second):
            raise StepFailed("the two llvmlite wheels differ")
        venv = ctx.work / "llvmlite-venv"
        make_venv(ctx, venv, first)
        ctx.llvmlite_venv = venv
        log = ctx.out / "llvmlite-tests.log"
        ctx.sh([venv / "bin" / "python", "-m", "llvmlite.tests", "-v"], cwd=Path("/"), env=no_pythonpath(ctx),
               stdout=log, check=False)
        summary = unittest_summary.summarize(log.read_text(errors="replace"))
        (ctx.out / "llvmlite-tests.json").write_text(json.dumps(summary, indent=2) + "\n")
        ctx.report.set("llvmlite_tests", summary | {"sdist": f"{sdist.name} sha256:{sha256(sdist)}"})
        ctx.note(f"llvmlite's suite: {summary['result']}, {summary['ran']} ran, {summary['skipped']} skipped")
        if summary["result"] != "OK" or not summary["ran"]:
            raise StepFailed(f"llvmlite's own test suite: {summary['result']} ({summary['failures']} failures, "
                             f"{summary['errors']} errors)")
        return State.OK


class NumbaSmoke(Step):
    """Numba from its release sdist on that llvmlite (the machine's compiler and NumPy), a @njit smoke test."""

    name = "numba-smoke"

    def plan(self, ctx: Context) -> Decision:
        if ctx.opts.numba is None:
            return skip("not asked (--numba SDIST)")
        return run() if ctx.opts.llvmlite else skip("--numba needs --llvmlite")

    def run(self, ctx: Context) -> State:
        sdist, venv = ctx.opts.numba, ctx.llvmlite_venv
        assert sdist is not None
        if not sdist.is_file():
            raise StepFailed(f"no Numba sdist at {sdist}")
        if venv is None:
            raise StepFailed("no llvmlite venv: the llvmlite step did not make one")
        dist = ctx.work / "numba-dist"
        shutil.rmtree(dist, ignore_errors=True)
        dist.mkdir(parents=True)
        t0 = time.monotonic()
        ctx.sh([venv / "bin" / "python", "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", dist, sdist], cwd=ctx.work, env=ctx.env | {"MAX_JOBS": str(ctx.opts.jobs)},
               stdout=ctx.out / "llvmlite-numba-build.log")
        build_s = round(time.monotonic() - t0)
        wheels = sorted(dist.glob("numba-*.whl"))
        ctx.sh([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall",
                *wheels])
        out = ctx.out / "llvmlite-numba-smoke.json"
        ctx.sh([venv / "bin" / "python", NUMBA_SMOKE, out], cwd=Path("/"), env=no_pythonpath(ctx), check=False)
        failed = ctx.rc
        if out.is_file():
            ctx.report.set("numba_smoke", json.loads(out.read_text()) | {"sdist": f"{sdist.name} sha256:{sha256(sdist)}",
                                                                         "build_s": build_s})
        if failed:
            raise StepFailed("the Numba smoke test failed", failed)
        return State.OK

