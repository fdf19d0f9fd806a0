"""Distributed compilation on a real LLVM build: `zig_support_install` spread its compiles (ccache's misses: all of
them, the cache was empty) over three distccd on 127.0.0.2-4 and got the golden tree (test_support_zig.py). What
distcc does when hosts die mid-build, and with a host lacking the compiler, is shown on the tiny recipe
(tests/integration/test_distribute_distcc.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from devtools.servers import Distccd


def test_every_host_compiled_and_the_record_counts_it_as_they_do(
    zig_support_install: Path, compile_hosts: list[Distccd]
) -> None:
    rec = json.loads(zig_support_install.read_text())
    d = rec["distributed"]
    assert [h["address"] for h in d["hosts"]] == [f"{x.addr}:{x.port}" for x in compile_hosts]
    assert all(h["answered"] for h in d["hosts"]) and d["distcc"] == shutil.which("distcc")
    for h, daemon in zip(d["hosts"], compile_hosts, strict=True):
        # the daemons still run: their own statistics count exactly what the record says they compiled
        assert h["compiles"] == daemon.compiled() and h["compiles"] >= 1, (h, daemon.log)
    assert d["remote"] == sum(h["compiles"] for h in d["hosts"])
    # 179 compiles go through ccache and, missing, on to distcc (178 of LLVM's and the test_package's main.cpp)
    assert d["remote"] + d["local"] >= 177, d
    assert rec["compile_cache"]["misses_to"].startswith("the compile hosts"), rec["compile_cache"]


def test_no_configure_compile_went_to_a_host(zig_support_install: Path) -> None:
    """Their answers decide the configuration; a host compiling preprocessed source may answer differently."""
    log = (zig_support_install.parent / "distcc.log").read_text()
    assert "completed ok" in log
    for name in ("CMakeCCompilerABI", "CMakeCXXCompilerABI", "CMakeScratch", "CMakeTmp", "CheckSymbolExists"):
        assert name not in log, name
