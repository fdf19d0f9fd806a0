"""build/env.py: one environment for the LLVM and the wheel builds (compiler, sandbox, prefix maps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT
from hermetic.build import env
from hermetic.core.errors import EnvironmentError_
from hermetic.model import toolchains
from hermetic.model.settings import parse_distribute_setting


def _zig_env(tmp_path: Path, **kw: object) -> env.BuildEnv:
    zig_root = tmp_path / "zig"
    zig_root.mkdir(parents=True)
    (zig_root / "zig").write_text("#!/bin/sh\n")
    compiler = env.Compiler(toolchains.for_root(ROOT, "zig"), zig_root, tmp_path / "tc", ROOT / "toolchain",
                            tmp_path / "zig-cache")
    return env.prepare(compiler, epoch=1234, offline="off", job_env={"JOB": "1"}, work=tmp_path, log=lambda m: None,
                       **kw)  # type: ignore[arg-type]


def test_the_compiler_s_variables_win_over_the_job_s(tmp_path: Path) -> None:
    benv = _zig_env(tmp_path, maps=((tmp_path / "src", "src/x"), (tmp_path / "b", "build")))
    cc = str(tmp_path / "tc" / "bin" / "cc")
    assert benv.env["CC"] == cc and benv.env["SOURCE_DATE_EPOCH"] == "1234" and benv.env["JOB"] == "1"
    assert "CC" not in benv.base and benv.base["LC_ALL"] == "C"  # the venv is made without the compiler's
    later = benv.layered({"CC": "gcc", "VIRTUAL_ENV": "/v"})
    assert later["CC"] == cc and later["VIRTUAL_ENV"] == "/v"
    assert later["HERMETIC_PREFIX_MAPS"] == (f"-ffile-prefix-map={tmp_path / 'src'}=/hermetic/src/x "
                                             f"-ffile-prefix-map={tmp_path / 'b'}=/hermetic/build")
    assert "HERMETIC_PREFIX_MAPS" not in _zig_env(tmp_path / "other").layered({})  # the LLVM build sets none


def test_a_step_runs_in_the_sandbox(tmp_path: Path) -> None:
    benv = _zig_env(tmp_path, path=lambda p: f"/pinned/bin:{p}")
    assert benv.prefix == () and not benv.offline.enforced  # --offline=off
    assert benv.env["PATH"].startswith("/pinned/bin:")
    out = benv.run(["sh", "-c", 'echo "$LC_ALL $TZ $JOB"; umask'], what="look", cwd=tmp_path)
    assert out.split() == ["C", "UTC", "1", "0022"]


def test_a_host_build_writes_no_wrappers(tmp_path: Path) -> None:
    compiler = env.Compiler(toolchains.for_root(ROOT, "host"), None, tmp_path / "tc", ROOT / "toolchain", tmp_path / "z")
    benv = env.prepare(compiler, epoch=1, offline="off", job_env={}, work=tmp_path, log=lambda m: None)
    assert benv.prepared.detect and benv.prepared.env == {} and not (tmp_path / "tc").exists()
    hosts = parse_distribute_setting("127.0.0.2:36/2")
    with pytest.raises(EnvironmentError_, match="needs the pinned toolchain"):
        env.prepare(compiler, epoch=1, offline="off", job_env={}, work=tmp_path, log=lambda m: None, hosts=hosts)
