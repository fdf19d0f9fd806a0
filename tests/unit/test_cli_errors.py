"""User mistakes end with a clear message and the exit code of their class, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import ROOT, hermetic
from hermetic.build import sandbox
from hermetic.core.errors import ExitCode, OfflineError, SubprocessFailed
from hermetic.model.options import resolve

pytestmark = pytest.mark.unit


def test_bad_variant(tmp_path: Path) -> None:
    proc = hermetic("build", "llvm", "--variant", "cuda", "--work-dir", str(tmp_path), check=False)
    assert proc.returncode == ExitCode.RECIPE
    assert "unknown variant 'cuda'" in proc.stderr and "valid variants: nvptx, support, triton" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_option_lists_valid_values(tmp_path: Path) -> None:
    proc = hermetic("build", "llvm", "--variant", "support", "--option", "targets=Z80", "--work-dir", str(tmp_path), check=False)
    assert proc.returncode == ExitCode.RECIPE
    assert "Z80" in proc.stderr and "NVPTX" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_source_offline(tmp_path: Path) -> None:
    """No cache, no mirror, no URLs, no apt: the user learns what to do."""
    proc = hermetic(
        "fetch", "--cache", str(tmp_path / "c"), "--no-urls", "--no-apt", "--variant", "support", check=False
    )
    assert proc.returncode == ExitCode.SOURCE
    assert "no source archive of llvm 19.1.7 could be fetched" in proc.stderr
    assert "--mirror" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_archive_path(tmp_path: Path) -> None:
    proc = hermetic("build", "llvm", "--variant", "support", "--source", str(tmp_path / "x.tar.xz"), "--work-dir", str(tmp_path), check=False)
    assert proc.returncode == ExitCode.SOURCE and "does not exist" in proc.stderr


def test_bad_setting_from_environment(tmp_path: Path) -> None:
    proc = hermetic("variants", env={"HERMETIC_OFFLINE": "sometimes"}, check=False)
    assert proc.returncode == ExitCode.USAGE and "auto, require, off" in proc.stderr


def test_settings_precedence(tmp_path: Path) -> None:
    (tmp_path / "recipes" / "llvm").mkdir(parents=True)
    (tmp_path / "recipes" / "llvm" / "conanfile.py").write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.hermetic]\nvariant = "triton"\njobs = 3\n')
    s = resolve({}, {}, tmp_path)
    assert (s.variant, s.jobs) == ("triton", 3)
    s = resolve({}, {"HERMETIC_VARIANT": "support", "HERMETIC_JOBS": "5"}, tmp_path)
    assert (s.variant, s.jobs) == ("support", 5)
    s = resolve({"variant": "nvptx"}, {"HERMETIC_VARIANT": "support"}, tmp_path)
    assert s.variant == "nvptx"
    assert s.cache_dir.name == "hermetic"


def test_subprocess_failure_carries_command_tail_and_repro(tmp_path: Path) -> None:
    env = sandbox.build_env(1736812800)
    with pytest.raises(SubprocessFailed) as exc:
        sandbox.run(
            ["sh", "-c", "echo first; echo the-last-line; exit 7"],
            what="run a failing step", env=env, cwd=tmp_path, quiet=True,
        )
    text = exc.value.render()
    assert "exited with 7" in text and "the-last-line" in text
    assert "repro: cd " in text and "SOURCE_DATE_EPOCH=1736812800" in text


def test_build_env_is_controlled() -> None:
    env = sandbox.build_env(42, host={"PATH": "/bin", "SECRET_TOKEN": "x", "CFLAGS": "-O0"})
    assert env["SOURCE_DATE_EPOCH"] == "42" and env["LC_ALL"] == "C" and env["TZ"] == "UTC"
    assert env["PYTHONHASHSEED"] == "0"
    assert "SECRET_TOKEN" not in env and "CFLAGS" not in env


def test_offline_require_fails_loudly_when_impossible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "_probe", lambda argv: False)
    with pytest.raises(OfflineError) as exc:
        sandbox.offline_policy("require")
    assert exc.value.exit_code == ExitCode.OFFLINE
    info, prefix = sandbox.offline_policy("auto")
    assert not info.enforced and prefix == () and "without enforcement" in info.reason


def test_offline_step_cannot_reach_the_network(tmp_path: Path) -> None:
    info, prefix = sandbox.offline_policy("require")
    assert info.enforced
    out = sandbox.run(
        [sys.executable, "-c", "import socket; print(sorted(i[1] for i in socket.if_nameindex()))"],
        what="list interfaces", env=sandbox.build_env(0), cwd=tmp_path, prefix=prefix, quiet=True,
    )
    assert out.strip() == "['lo']"


def test_root_is_found_from_a_subdirectory() -> None:
    s = resolve({}, {}, ROOT / "src" / "hermetic")
    assert s.root == ROOT


def test_wheel_for_another_architecture_is_refused_not_ignored(tmp_path: Path) -> None:
    import platform

    other = "arm64" if platform.machine() == "x86_64" else "amd64"
    proc = hermetic("wheel", str(ROOT / "src" / "compiler"), "--llvm", str(tmp_path), "--arch", other,
                    "--work-dir", str(tmp_path / "w"), check=False)
    assert proc.returncode == ExitCode.USAGE
    # a cross-built wheel is for another architecture's Python: without one, --arch is refused, saying what to pass
    assert f"a wheel for {other} needs an {other} Python" in proc.stderr and "--python ROOT/usr/bin/python3.X" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "w").exists()
