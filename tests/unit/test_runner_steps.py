"""The GPU runner's steps without a GPU: the loop records run, done, skip and failed with their reasons, a step that
needs a failed or skipped one is skipped saying which, and each step's plan follows the options."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.runner import core, main, steps_wheel
from devtools.runner.core import Context, Decision, Report, State, Step, StepFailed, execute, run, skip
from devtools.runner.options import resolve
from devtools.runner.records import BuildRecord

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "unit" / "data" / "llvm-nvptx-record.json"


def make_ctx(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> Context:
    opts = resolve(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), *argv], env or {}, tmp_path)
    opts.out.mkdir(parents=True, exist_ok=True)
    return Context(opts, ROOT, Report(opts.out / "report.json", {}), "auto", dict(os.environ))


class Fake(Step):
    """A step doing what it is told: pass, build nothing (done), fail, or raise as a defect would."""

    def __init__(self, name: str, does: str = "ok", needs: tuple[str, ...] = (), planned: Decision | None = None):
        self.name, self.does, self.planned = name, does, planned or run()
        self.needs = needs  # type: ignore[misc]  # per instance here, a class constant in the runner's steps

    def plan(self, ctx: Context) -> Decision:
        return self.planned

    def run(self, ctx: Context) -> State:
        ctx.note(f"{self.name} says hello")
        if self.does == "fail":
            ctx.sh([sys.executable, "-c", "import sys; print('going down'); sys.exit(7)"])
        if self.does == "defect":
            raise KeyError("a bug of the runner")
        ctx.report.set(self.name, {"produced": True})
        return State.DONE if self.does == "done" else State.OK


def test_failures_skip_what_needs_them_and_the_rest_goes_on(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    steps = [
        Fake("a"), Fake("b", "fail"), Fake("c", needs=("b",)), Fake("d", "done", needs=("a",)),
        Fake("e", planned=skip("not asked (--e)")), Fake("f", needs=("e",)), Fake("g", "defect"), Fake("h", needs=("a", "d")),
        Fake("i", needs=("f",)),
    ]
    seen: list[int] = []
    got = execute(steps, ctx, tmp_path / "logs", on_step=lambda o: seen.append(len(o)))
    states = {o.name: (o.state, o.reason) for o in got}
    assert states["a"] == (State.OK, "")
    assert states["b"][0] is State.FAILED and "exited with 7" in states["b"][1]
    assert states["c"] == (State.SKIP, "b failed")
    assert states["d"] == (State.DONE, "")
    assert states["e"] == (State.SKIP, "not asked (--e)")
    assert states["f"] == (State.SKIP, "e skipped (not asked (--e))")
    assert states["i"] == (State.SKIP, "e skipped (not asked (--e))")  # the chain's first cause, not its last link
    assert states["g"][0] is State.FAILED and "KeyError" in states["g"][1]  # a defect fails its step, not the run
    assert states["h"] == (State.OK, "")
    assert seen == list(range(1, 10))
    assert next(o for o in got if o.name == "b").rc == 7
    # each step that ran has its own log, the command's output in it; a skipped one has none
    assert "going down" in (tmp_path / "logs" / "b.log").read_text()
    assert "a says hello" in (tmp_path / "logs" / "a.log").read_text()
    assert not (tmp_path / "logs" / "c.log").exists()
    # each step wrote its part of the report as it ran
    report = json.loads((ctx.out / "report.json").read_text())
    assert report["a"] == {"produced": True} and "c" not in report and report["schema"] == core.SCHEMA
    assert [o.as_json()["status"] for o in got] == [
        "ok", "failed", "skipped", "done", "skipped", "skipped", "failed", "ok", "skipped"]


def test_a_command_is_logged_captured_and_its_exit_code_kept(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    with open(tmp_path / "step.log", "w") as log:
        ctx.log = log
        out = ctx.sh([sys.executable, "-c", "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"],
                     capture=True)
        assert out == "to stdout\n"
        ctx.sh([sys.executable, "-c", "raise SystemExit(3)"], check=False)
        assert ctx.rc == 3
        with pytest.raises(StepFailed) as exc:
            ctx.sh([sys.executable, "-c", "raise SystemExit(5)"])
        assert exc.value.rc == 5
        with pytest.raises(StepFailed) as exc:
            ctx.sh([str(tmp_path / "no-such-program")])
        assert exc.value.rc == 127
    text = (tmp_path / "step.log").read_text()
    assert "to stdout" in text and "to stderr" in text and "$ " in text


def plans(ctx: Context) -> dict[str, Decision]:
    return {s.name: s.plan(ctx) for s in (cls() for cls in main.STEPS)}


def test_the_plan_follows_the_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps_wheel, "has_device", lambda: False)
    got = plans(make_ctx(tmp_path))
    assert got["build-support"].state is State.RUN and got["build-llvm"].state is State.RUN
    assert got["wheel"].state is State.RUN and got["pack"].state is State.RUN
    assert "no CUDA device" in got["gpu-tests"].reason  # here: the gpu tier is skipped, and says why
    for name in ("wheel-again", "tilec-bench", "cold-ab", "build-host", "bench-toolchain", "llvmlite-tests", "scale"):
        assert got[name].state is State.SKIP and "not asked" in got[name].reason, name

    got = plans(make_ctx(tmp_path, "--no-support", "--no-wheel", "--no-pack", "--numba", "n.tar.gz"))
    assert got["build-support"].reason == "--no-support" and got["wheel"].reason == "--no-wheel"
    assert got["pack"].reason == "--no-pack" and got["numba-smoke"].reason == "--numba needs --llvmlite"

    other = "arm64" if steps_wheel.here_arch() == "amd64" else "amd64"
    got = plans(make_ctx(tmp_path, "--arch", other))
    assert got["wheel"].state is State.SKIP and other in got["wheel"].reason

    got = plans(make_ctx(tmp_path, "--scale"))
    assert got["scale"].state is State.RUN and got["scale-tools"].state is State.RUN
    assert all(got[n].state is State.SKIP and "--scale" in got[n].reason for n in ("build-support", "build-llvm", "golden"))

    monkeypatch.setattr(steps_wheel, "has_device", lambda: True)
    assert plans(make_ctx(tmp_path))["gpu-tests"].state is State.RUN


def record(**change: Any) -> BuildRecord:
    data = json.loads(RECORD.read_text())
    for key, value in change.items():
        data[key] = value
    return BuildRecord.from_json(data, str(RECORD))


def test_ptxas_runs_only_for_a_record_that_lists_ptx(tmp_path: Path) -> None:
    from devtools.runner.steps_llvm import Ptxas

    ctx = make_ctx(tmp_path)
    assert Ptxas().plan(ctx).state is State.RUN  # a dry run: nothing built yet
    ctx.records["build-llvm"] = record()
    assert Ptxas().plan(ctx).state is State.RUN
    ctx.records["build-llvm"] = record(variant="support", test_package={"ran": True, "ptx": []})
    assert Ptxas().plan(ctx) == skip("the support test_package lowers no PTX (its record lists none)")


def test_a_reused_build_says_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hermetic keeps an identical earlier build: its record finished before the step started."""
    from devtools.runner import steps_llvm

    ctx = make_ctx(tmp_path)
    answer = {"record": str(RECORD)}
    monkeypatch.setattr(Context, "hermetic", lambda self, *a, **k: answer)
    got = execute([Fake("install-wheels"), steps_llvm.BuildLlvm()], ctx, tmp_path / "logs")
    assert got[1].state is State.DONE
    assert (ctx.out / "record.json").read_bytes() == RECORD.read_bytes()
    report = json.loads((ctx.out / "report.json").read_text())
    assert report["llvm"]["tree_digest"] == record().tree.digest
    assert report["variants"]["nvptx"]["inputs_digest"] == record().inputs_digest


def test_the_dry_run_prints_every_step_and_makes_nothing(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_RUNNER_")}
    proc = subprocess.run([sys.executable, "-m", "devtools.runner", "--dry-run", "--out", str(out), "--work", str(work),
                           "--toolchain", "zig", "--no-support", "--again"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    steps = re.findall(r"^ *\d+\. \[(run |skip)\] (\S+)(.*)$", proc.stdout, re.M)
    assert [name for _, name, _ in steps] == [cls.name for cls in main.STEPS]
    by_name = {name: f"[{state}] {name}{rest}" for state, name, rest in steps}
    assert "[skip] build-support" in by_name["build-support"] and "--no-support" in by_name["build-support"]
    assert "[run ] wheel-again" in by_name["wheel-again"]
    assert "hermetic build llvm --variant nvptx" in proc.stdout and "--toolchain zig" in proc.stdout
    assert not out.exists() and not work.exists()


def test_with_a_bundle_every_build_takes_it_and_nothing_carried(tmp_path: Path) -> None:
    from devtools.runner import bundle, steps_bench, steps_llvm

    ctx = make_ctx(tmp_path, "--bundle", str(tmp_path / "b"), "--compare-host")
    ctx.bundle = bundle.Bundle(tmp_path / "b", "bundle-llvm-nvptx", "sha256:" + "ab" * 32, "nvptx", "cd" * 32, 9,
                               10**8, {"name": "llvm-project-19.1.7.src-nvptx.tar.xz", "sha256": "ef" * 32}, {})
    ctx.bundle_source = tmp_path / "work" / "bundle-source" / "llvm-project-19.1.7.src-nvptx.tar.xz"
    b = ["--bundle", str(tmp_path / "b")]
    nvptx = steps_llvm.build_args(ctx, "nvptx", tmp_path / "w")
    assert nvptx[4:6] == b and "--source" not in nvptx  # the bundle's own variant: from its pruned source, as planned
    support = steps_llvm.build_args(ctx, "support", tmp_path / "w")
    assert support[4:8] == [*b, "--source", str(ctx.bundle_source)]  # another: from that archive by path
    for args in (nvptx, support, steps_wheel.wheel_args(ctx, Path("P"), Path("d"), Path("w"))):
        assert "--wheelhouse" not in args and "--mirror" not in args
    # tilec's wheel from the bundle's own src/compiler (no PROJECT); a baseline from its own
    assert steps_wheel.wheel_args(ctx, Path("P"), Path("d"), Path("w"))[:3] == ["wheel", "--llvm", "P"]
    assert steps_wheel.wheel_args(ctx, Path("P"), Path("d"), Path("w"), project=Path("base"))[:2] == ["wheel", "base"]
    assert [*b] == steps_wheel.wheel_inputs(ctx)
    # --checkout-compiler: this checkout's src/compiler, with the bundle's requirements and toolchain still
    mine = make_ctx(tmp_path, "--bundle", str(tmp_path / "b"), "--checkout-compiler")
    args = steps_wheel.wheel_args(mine, Path("P"), Path("d"), Path("w"))
    assert args[:2] == ["wheel", str(ROOT / "src" / "compiler")]
    assert args[args.index("--bundle"):args.index("--bundle") + 2] == b and "--wheelhouse" not in args

    # a bundle the bundle step could not open: no build runs from anything else
    ctx.bundle = None
    got = plans(ctx)
    assert got["bundle"].state is State.RUN
    assert all(got[n] == skip("bundle failed") for n in ("build-support", "build-llvm", "build-host"))
    assert steps_bench.BuildHost().plan(ctx) == skip("bundle failed")
    without = plans(make_ctx(tmp_path))
    assert without["bundle"].state is State.SKIP and without["build-llvm"].state is State.RUN


def test_a_bundle_build_must_have_its_plans_inputs_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devtools.runner import bundle, steps_llvm

    ctx = make_ctx(tmp_path, "--bundle", str(tmp_path / "b"))
    planned = record().inputs_digest
    ctx.bundle = bundle.Bundle(tmp_path / "b", "n", "sha256:" + "ab" * 32, "nvptx", planned, 9, 1, {"name": "p"}, {})
    monkeypatch.setattr(Context, "hermetic", lambda self, *a, **k: {"record": str(RECORD)})
    got = execute([Fake("install-wheels"), steps_llvm.BuildLlvm()], ctx, tmp_path / "logs")
    assert got[1].state is State.DONE
    assert json.loads((ctx.out / "report.json").read_text())["bundle"]["matches_plan"] is True
    ctx.bundle = bundle.Bundle(tmp_path / "b", "n", "sha256:" + "ab" * 32, "nvptx", "0" * 64, 9, 1, {"name": "p"}, {})
    got = execute([Fake("install-wheels"), steps_llvm.BuildLlvm()], ctx, tmp_path / "logs")
    assert got[1].state is State.FAILED and "not its plan's" in got[1].reason
    assert json.loads((ctx.out / "report.json").read_text())["bundle"]["matches_plan"] is False


def test_the_second_builders_steps_run_only_with_a_key(tmp_path: Path) -> None:
    assert {n: d.reason for n, d in plans(make_ctx(tmp_path)).items() if n in ("image", "sign")} == {
        "image": "not asked (--sign-key)", "sign": "not asked (--sign-key)"}
    key = str(tmp_path / "k.key")
    ctx = make_ctx(tmp_path, "--sign-key", key, "--gpg-key", "g.key", "--identity", "r.example/llvm/nvptx:19.1.7")
    got = plans(ctx)
    assert got["image"] == run("nvptx only: --identity has no {variant} for the other trees")
    assert got["sign"] == run("as r.example/llvm/nvptx:19.1.7")
    from devtools.runner import steps_sign

    sign, links = steps_sign.Sign().commands(ctx)
    assert sign[:3] == ["hermetic", "sign", str(ctx.work / "image" / "VARIANT")] and "--lookaside" in sign
    assert sign[sign.index("--identity") + 1] == "r.example/llvm/nvptx:19.1.7" and "--gpg-key" in sign
    assert links[1:3] == ["intoto", "links"] and "--links-only" in links and links[-2:] == ["--sign-key", key]

    assert steps_sign.identity_for(ctx, "nvptx") == "r.example/llvm/nvptx:19.1.7"
    assert steps_sign.identity_for(ctx, "support") is None  # one reference names one image
    ctx = make_ctx(tmp_path, "--sign-key", key, "--identity", "r.example/llvm/{variant}:19.1.7")
    assert plans(ctx)["image"] == run()
    assert [steps_sign.identity_for(ctx, v) for v in ("nvptx", "support")] == [
        "r.example/llvm/nvptx:19.1.7", "r.example/llvm/support:19.1.7"]
