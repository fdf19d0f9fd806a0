"""The real pinned toolchain: the ziglang wheel fetched into the verified cache, unpacked, and used
through hermetic's generated wrappers to compile, link and run a C++ program for x86_64-linux-gnu.2.28."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT, hermetic
from hermetic.build import wrappers
from hermetic.build.env import zig_global_cache
from hermetic.fetch import toolchain
from hermetic.model import toolchains

PROGRAM = r"""
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
int main() {
    std::map<std::string, int> m{{"zig", 17}, {"clang", 22}};
    try { throw std::runtime_error("unwound"); }
    catch (const std::exception& e) { std::cout << e.what() << ' ' << m["zig"] + m["clang"] << '\n'; }
    return 0;
}
"""


def test_pinned_zig_compiles_and_runs_cpp_for_glibc_2_28(tmp_path: Path, source_cache: Path, tiny: tuple[str, ...]) -> None:
    if platform.machine() != "x86_64":
        pytest.skip("the pinned ziglang wheel is the x86_64 one")
    tc = toolchains.for_root(ROOT, "zig")
    assert tc.name == "zig" and tc.target == "x86_64-linux-gnu.2.28"
    # From the cache when a build already fetched it, else PyPI (pip download, hash-checked twice).
    root = toolchain.ensure(source_cache, tc, [], use_urls=True)
    assert root is not None and toolchain.cached(source_cache, tc) is not None
    # `hermetic fetch --toolchain zig` finds the same verified tree
    got = json.loads(hermetic("fetch", *tiny, "--toolchain", "zig", "--cache", str(source_cache), "-q").stdout)
    assert got["toolchain"] == {"label": tc.label, "path": str(root)}
    prep = wrappers.prepare(tc, root, tmp_path / "tc", ROOT / "toolchain", tmp_path / "zig-cache",
                             global_cache=zig_global_cache(source_cache))
    src = tmp_path / "main.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "main"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LC_ALL": "C"}
    wrappers.run_checked([prep.env["CXX"], "-O2", "-std=c++17", str(src), "-o", str(exe)], "compile with zig c++", env, tmp_path)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out == "unwound 39\n"
    # zig's caches stayed where hermetic put them (its runtimes in the source cache's, shared by every build of
    # this user), not in ~/.cache/zig
    assert (tmp_path / "zig-cache").is_dir() and not (tmp_path / ".cache" / "zig").exists()
    assert prep.env["ZIG_GLOBAL_CACHE_DIR"] == str(zig_global_cache(source_cache))
    # built against zig's glibc 2.28 stubs: no symbol version newer than the floor
    assert max(_glibc_versions(exe)) <= (2, 28), sorted(_glibc_versions(exe))
    # linked with zig's libc++ (statically), not the host's libstdc++
    needed = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True, check=True).stdout
    assert "libstdc++" not in needed


def _glibc_versions(exe: Path) -> set[tuple[int, ...]]:
    versions = subprocess.run(["objdump", "-T", str(exe)], capture_output=True, text=True, check=True).stdout
    found = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", versions)}
    assert found, f"{exe} needs no versioned glibc symbol: not a glibc program?"
    return found


def test_glibc_2_17_floor_compiles_and_runs_cpp(tmp_path: Path, source_cache: Path) -> None:
    """`--glibc 2.17` (manylinux2014's floor): the same program against zig's glibc 2.17 stubs."""
    if platform.machine() != "x86_64":
        pytest.skip("the pinned ziglang wheel is the x86_64 one")
    tc = toolchains.for_root(ROOT, "zig", glibc="2.17")
    assert tc.target == "x86_64-linux-gnu.2.17"
    root = toolchain.ensure(source_cache, tc, [], use_urls=True)
    assert root is not None
    prep = wrappers.prepare(tc, root, tmp_path / "tc", ROOT / "toolchain", tmp_path / "zig-cache",
                             global_cache=zig_global_cache(source_cache))
    src = tmp_path / "main.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "main"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LC_ALL": "C"}
    wrappers.run_checked([prep.env["CXX"], "-O2", "-std=c++17", str(src), "-o", str(exe)], "compile with zig c++", env, tmp_path)
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout == "unwound 39\n"
    assert max(_glibc_versions(exe)) <= (2, 17), sorted(_glibc_versions(exe))
