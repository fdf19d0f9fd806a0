"""The GPU runner's options: one table makes the flags, the HERMETIC_RUNNER_* variables and the help; a flag wins
over a variable, a variable over the default; a bad value is refused before anything is made."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from devtools.runner import options
from devtools.runner.options import Kind, Options, UsageError, env_name, resolve

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_is_a_row_with_its_own_flag_and_variable() -> None:
    rows = options.specs()
    assert [name for name, _ in rows] == [f.name for f in fields(Options)]
    flags = [s.flag for _, s in rows]
    assert len(set(flags)) == len(flags)
    for name, s in rows:
        assert s.flag.startswith("--") and s.help
        want = "--no-" + name.replace("_", "-") if s.kind is Kind.OFF else "--" + name.replace("_", "-")
        assert s.flag == want, f"{name}: the flag {s.flag} does not say the option's name"
        assert env_name(name) == "HERMETIC_RUNNER_" + name.upper()


def test_the_help_names_every_flag_and_variable() -> None:
    text = options.parser().format_help()
    for name, s in options.specs():
        assert s.flag in text and env_name(name) in text.replace("\n", "").replace(" ", "")


def test_defaults(tmp_path: Path) -> None:
    got = resolve([], {}, tmp_path)
    assert got.out == Path("/tmp/hermetic-runner/out") and got.variant == "nvptx" and got.jobs == (os.cpu_count() or 1)
    assert got.source == tmp_path / ".carry" / "llvm-project-19.1.7.src-nvptx.tar.xz"
    assert got.pack and got.support and got.wheel and not got.bench and not got.dry_run
    assert got.mirror is None and got.wheelhouse is None  # carried only when they are there
    (tmp_path / ".zig").mkdir()
    (tmp_path / ".carry" / "wheelhouse").mkdir(parents=True)
    got = resolve([], {}, tmp_path)
    assert got.mirror == tmp_path / ".zig" and got.wheelhouse == tmp_path / ".carry" / "wheelhouse"
    assert got.golden == tmp_path / "tests" / "golden" / "digests.json"


def test_a_flag_wins_over_the_variable_and_the_variable_over_the_default(tmp_path: Path) -> None:
    env = {"HERMETIC_RUNNER_VARIANT": "support", "HERMETIC_RUNNER_JOBS": "3", "HERMETIC_RUNNER_COLD_ROUNDS": ""}
    got = resolve([], env, tmp_path)
    assert (got.variant, got.jobs, got.cold_rounds) == ("support", 3, 4)  # an empty variable is unset
    got = resolve(["--variant", "nvptx", "-j", "5"], env, tmp_path)
    assert (got.variant, got.jobs) == ("nvptx", 5)


def test_switches_both_ways(tmp_path: Path) -> None:
    assert resolve(["--no-pack", "--again"], {}, tmp_path).pack is False
    assert resolve([], {"HERMETIC_RUNNER_PACK": "0", "HERMETIC_RUNNER_AGAIN": "yes"}, tmp_path).again is True
    assert resolve([], {"HERMETIC_RUNNER_PACK": "0"}, tmp_path).pack is False
    # --no-pack wins over a variable that says pack
    assert resolve(["--no-pack"], {"HERMETIC_RUNNER_PACK": "1"}, tmp_path).pack is False
    assert resolve(["--tilec-bench"], {"HERMETIC_RUNNER_TILEC_BENCH": "0"}, tmp_path).tilec_bench is True


def test_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    got = resolve(["--out", "o", "--llvmlite", "sd/llvmlite.tar.gz"], {"HERMETIC_RUNNER_WORK": "w"}, tmp_path)
    assert got.out == tmp_path / "o" and got.work == tmp_path / "w" and got.llvmlite == tmp_path / "sd" / "llvmlite.tar.gz"


@pytest.mark.parametrize(("env", "words"), [
    ({"HERMETIC_RUNNER_BENCH": "maybe"}, ("HERMETIC_RUNNER_BENCH", "1 or 0")),
    ({"HERMETIC_RUNNER_JOBS": "many"}, ("HERMETIC_RUNNER_JOBS", "number")),
    ({"HERMETIC_RUNNER_ARCH": "riscv64"}, ("HERMETIC_RUNNER_ARCH", "amd64")),
    ({"HERMETIC_RUNNER_COLD_AB": "1"}, ("--cold-ab", "--baseline-src")),
    ({"HERMETIC_RUNNER_CHECKOUT_COMPILER": "1"}, ("--checkout-compiler", "--bundle")),
    ({"HERMETIC_RUNNER_JOBS": "0"}, ("--jobs", ">= 1")),
])
def test_bad_values_are_refused_by_name(tmp_path: Path, env: dict[str, str], words: tuple[str, str]) -> None:
    with pytest.raises(UsageError) as exc:
        resolve([], env, tmp_path)
    text = f"{exc.value.what} {exc.value.fix}"
    assert all(w in text for w in words), text


def run_runner(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_RUNNER_")}
    return subprocess.run([sys.executable, "-m", "devtools.runner", *args], cwd=ROOT, env=base | (env or {}),
                          capture_output=True, text=True, timeout=120)


def test_cold_ab_without_a_baseline_is_refused_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_runner("--cold-ab", "--out", str(out), "--work", str(tmp_path / "work"))
    assert proc.returncode == 2
    assert "--baseline-src" in proc.stderr and "fix:" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() and not (tmp_path / "work").exists()  # nothing made, nothing removed


def test_an_unknown_flag_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_runner("--no-such-thing", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "--no-such-thing" in proc.stderr and not (tmp_path / "out").exists()


def test_a_bundle_replaces_the_carried_source_toolchain_and_wheelhouse(tmp_path: Path) -> None:
    (tmp_path / ".zig").mkdir()
    (tmp_path / ".carry" / "wheelhouse").mkdir(parents=True)
    got = resolve(["--bundle", str(tmp_path / "b")], {}, tmp_path)
    assert got.bundle == tmp_path / "b" and (got.source, got.mirror, got.wheelhouse) == (None, None, None)
    assert resolve([], {"HERMETIC_RUNNER_BUNDLE": "b"}, tmp_path).source is None


@pytest.mark.parametrize(("argv", "env", "words"), [
    (["--source", "a.tar.xz"], {}, ("--source", "drop --source")),
    ([], {"HERMETIC_RUNNER_MIRROR": ".zig"}, ("--mirror",)),
    (["--wheelhouse", "w", "--mirror", "m"], {}, ("--wheelhouse, --mirror",)),
    (["--scale"], {}, ("--scale", "without --bundle")),
    (["--bench"], {}, ("--bench", "without --bundle")),
])
def test_what_a_bundle_holds_is_not_taken_from_elsewhere_too(tmp_path: Path, argv: list[str], env: dict[str, str],
                                                             words: tuple[str, ...]) -> None:
    with pytest.raises(UsageError) as exc:
        resolve(["--bundle", "b", *argv], env, tmp_path)
    text = f"{exc.value.what} {exc.value.fix}"
    assert all(w in text for w in words), text


def test_signing_as_a_second_builder_needs_a_key_and_the_reference(tmp_path: Path) -> None:
    got = resolve(["--out", "/o", "--sign-key", "k", "--gpg-key", "g", "--identity", "r.example/l/n:1"], {}, tmp_path)
    assert got.lookaside == Path("/o/lookaside")  # where device.sh's collect finds the OpenPGP signature
    assert resolve(["--sign-key", "k", "--identity", "r/n:1"], {}, tmp_path).lookaside is None
    for argv, words in ((["--sign-key", "k"], ("--identity",)), (["--gpg-key", "g"], ("--sign-key",)),
                        (["--identity", "r/n:1"], ("--sign-key",))):
        with pytest.raises(UsageError) as exc:
            resolve(argv, {}, tmp_path)
        assert all(w in f"{exc.value.what} {exc.value.fix}" for w in words), argv
