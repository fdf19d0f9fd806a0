"""Distributed compilation with the real distcc: distccd daemons on 127.0.0.2, .3, .4 and a real build of the
tiny recipe (tests/functional/ spreads a real LLVM build too).

The daemons run the compilers `hermetic toolchain compile-host` set up (the pinned zig toolchain under
its identity-named wrappers). One zig build of tiny's `support` is spread over three of them; one daemon is
killed once it has compiled two files (distcc sends what it had to the other hosts), and the other
two once they have compiled 15 together, each at least one (the rest compile here). The tree must still be the one
`tiny_zig_install` built locally, the record must say what each host compiled (as their own
statistics count), what failed and went elsewhere or fell back here, and name exactly the hosts
the build could reach.
A daemon without the compiler is shown, on one small file, to get nothing built wrongly: distcc
compiles the file here instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.servers import Distccd
from helpers import hermetic
from hermetic.build import compile_cache, distribute
from hermetic.core import platforms
from hermetic.fetch import toolchain
from hermetic.model import record, toolchains
from hermetic.model import settings as settings_values

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compile_host(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Path:
    """A compile host's directory, set up as a user would: its bin/ goes on distccd's PATH."""
    base = tmp_path_factory.mktemp("compile-host")
    proc = hermetic("toolchain", "compile-host", str(base), "--cache", str(source_cache), "--toolchain", "zig")
    names = json.loads(proc.stdout)["compilers"]
    assert sorted(p.name for p in (base / "bin").iterdir()) == sorted(names)
    return base / "bin"


# -- one file through the real daemons: seconds ------------------------------------------------------------


def _distcc_env(tmp_path: Path, bin_dir: Path, daemon: Distccd, name: str) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return env | distribute.client_env(settings_values.Distribution((settings_values.parse_host(daemon.spec),)), False,
                                       tmp_path / f"state-{name}", tmp_path / f"{name}.log")


def _zig_wrappers(tmp_path: Path, source_cache: Path) -> dict[str, Path]:
    """The pinned zig's compiler wrappers of a distributed build, in tmp_path/bin."""
    tc = toolchains.for_root(ROOT)
    zig = toolchain.unpacked(source_cache, tc)
    assert zig is not None
    return distribute.write_wrappers(tc, zig, tmp_path / "zig-cache", tmp_path / "bin")


SOURCE = '#include <vector>\nint f(int n) { return (int)std::vector<int>(n).size(); }\nconst char *g() { return __FILE__; }\n'


def test_a_host_without_the_compiler_builds_nothing_and_the_file_is_compiled_here(
    tmp_path: Path, compile_host: Path, source_cache: Path
) -> None:
    wrappers = _zig_wrappers(tmp_path, source_cache)
    (tmp_path / "a.cpp").write_text(SOURCE)
    local = ["-O2", "-MD", "-MF", "local.d", "-c", "a.cpp", "-o", "local.o"]
    subprocess.run([str(wrappers["c++"]), *local], cwd=tmp_path, check=True)
    with_compiler, without = Distccd("127.0.0.2", tmp_path, compile_host), Distccd("127.0.0.3", tmp_path, None)
    try:
        results = {}
        for name, d in (("with", with_compiler), ("without", without)):
            env = _distcc_env(tmp_path, tmp_path / "bin", d, name)
            subprocess.run(["distcc", wrappers["c++"].name, distribute.DEPFILE_FLAG, "-O2", "-MD", "-MF", f"{name}.d",
                            "-c", "a.cpp", "-o", f"{name}.o"], cwd=tmp_path, env=env, check=True)
            results[name] = distribute.parse_client_log((tmp_path / f"{name}.log").read_text())
        assert (tmp_path / "with.o").read_bytes() == (tmp_path / "local.o").read_bytes()
        assert (tmp_path / "without.o").read_bytes() == (tmp_path / "local.o").read_bytes()
        assert results["with"].remote == {f"127.0.0.2:{with_compiler.port}": 1} and with_compiler.compiled() == 1
        assert results["without"].remote == {} and results["without"].retried == 1 and without.compiled() == 0
    finally:
        with_compiler.kill()
        without.kill()


def test_behind_a_compile_cache_a_miss_goes_to_a_host_and_a_hit_to_none(
    tmp_path: Path, compile_host: Path, source_cache: Path
) -> None:
    """--compile-cache with --distribute: ccache first, its prefix_command the build's distcc launcher."""
    wrappers = _zig_wrappers(tmp_path, source_cache)
    launch = tmp_path / "launch"
    launch.write_text(distribute.launcher_script(shutil.which("distcc") or "distcc", {wrappers["c++"]: wrappers["c++"].name}))
    launch.chmod(0o755)
    conf = compile_cache.write_config(tmp_path / "ccache", settings_values.parse_compile_cache(f"file://{tmp_path / 'shared'}"), tmp_path,
                                      "string:test", "clang", prefix_command=launch)
    daemon = Distccd("127.0.0.2", tmp_path, compile_host)
    objects, stats = [], []
    try:
        for name in ("local", "one", "two"):
            d = tmp_path / name
            d.mkdir()
            (d / "a.cpp").write_text(SOURCE)
            argv = [str(wrappers["c++"]), "-O2", "-MD", "-MF", "a.d", "-c", "a.cpp", "-o", "a.o"]
            if name == "local":
                subprocess.run(argv, cwd=d, check=True)
            else:
                env = _distcc_env(tmp_path, tmp_path / "bin", daemon, name) | {"CCACHE_CONFIGPATH": str(conf)}
                subprocess.run(["ccache", *argv], cwd=d, env=env, check=True)
                printed = subprocess.run(["ccache", "--print-stats"], env=env, check=True, capture_output=True, text=True)
                stats.append((compile_cache.parse_stats(printed.stdout, record.CacheStats), daemon.compiled()))
                subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
            objects.append((d / "a.o").read_bytes())
        # the miss was compiled on the host (the local object), the hit in another directory compiled nowhere
        assert objects[1] == objects[0] and objects[2] == objects[0]
        (miss, after_miss), (hit, after_hit) = stats
        assert (miss.misses, after_miss) == (1, 1), stats
        assert (hit.hits, hit.misses, after_hit) == (1, 0, 1), stats
    finally:
        daemon.kill()


def test_a_cross_compile_goes_to_a_host_set_up_for_the_target(tmp_path: Path, compile_host: Path, source_cache: Path) -> None:
    """--distribute with --arch arm64 here: `compile-host --arch arm64` gives a host the target's compilers."""
    host = tmp_path / "host"
    proc = hermetic("toolchain", "compile-host", str(host), "--cache", str(source_cache), "--toolchain", "zig",
                    "--arch", "arm64")
    arm = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig", None, platforms.zig_arch("arm64"))
    names = [distribute.compiler_name(arm, lang) for lang in distribute.LANGS]
    assert json.loads(proc.stdout)["compilers"] == names
    zig = toolchain.unpacked(source_cache, arm)
    assert zig is not None
    wrappers = distribute.write_wrappers(arm, zig, tmp_path / "zig-cache", tmp_path / "bin")
    (tmp_path / "a.cpp").write_text(SOURCE)
    subprocess.run([str(wrappers["c++"]), "-O2", "-MD", "-MF", "local.d", "-c", "a.cpp", "-o", "local.o"], cwd=tmp_path,
                   check=True)
    local = (tmp_path / "local.o").read_bytes()
    assert local[:4] == b"\x7fELF" and int.from_bytes(local[18:20], "little") == 183  # EM_AARCH64
    # a host set up for amd64 only has no compiler of that name: the file comes back and compiles here
    for name, bin_dir, remote in (("arm", host / "bin", 1), ("amd64-only", compile_host, 0)):
        daemon = Distccd("127.0.0.3", tmp_path, bin_dir)
        try:
            env = _distcc_env(tmp_path, tmp_path / "bin", daemon, name)
            subprocess.run(["distcc", wrappers["c++"].name, distribute.DEPFILE_FLAG, "-O2", "-MD", "-MF", f"{name}.d",
                            "-c", "a.cpp", "-o", f"{name}.o"], cwd=tmp_path, env=env, check=True)
            assert (tmp_path / f"{name}.o").read_bytes() == local
            assert daemon.compiled() == remote
            counts = distribute.parse_client_log((tmp_path / f"{name}.log").read_text())
            assert sum(counts.remote.values()) == remote and counts.retried == 1 - remote
        finally:
            daemon.kill()


# -- a real build over three hosts, one of them killed ---------------------------------------------------


@pytest.fixture(scope="module")
def spread_build(
    tmp_path_factory: pytest.TempPathFactory, compile_host: Path, source_cache: Path, tiny_zig_install: Path,
    tiny: tuple[str, ...],
) -> Iterator[tuple[dict[str, Any], list[Distccd], int]]:
    base = tmp_path_factory.mktemp("distributed")
    work = base / "work"
    # zig's own runtime (libc++, crt) built by the local build, so only tiny's compiles are left to spread
    if (tiny_zig_install.parents[2] / "zig-cache").is_dir():
        shutil.copytree(tiny_zig_install.parents[2] / "zig-cache", work / "zig-cache", symlinks=True)
    daemons = [Distccd("127.0.0.2", base, compile_host), Distccd("127.0.0.3", base, compile_host),
               Distccd("127.0.0.4", base, compile_host, slots=1)]
    # what each daemon had compiled when it was killed: the third after its first compile (a fresh-clone CI run
    # on two busy cores saw it get 1 of the 35 under distcc's random choice, so waiting for 2 never killed it),
    # then the others after 15 together, each having compiled at least one
    killed: dict[str, int] = {}
    done = threading.Event()

    def kill_when_busy() -> None:
        first, rest = daemons[2], daemons[:2]
        while not done.wait(0.02):  # tiny's compiles take a fraction of a second each
            try:
                if not killed and first.compiled() >= 1:
                    killed[first.addr] = first.compiled()
                    first.kill()
                # each of them at least once: under load one can still be on its first files when the other
                # has done 15 (a fresh-clone CI run saw 0 and 15)
                elif killed and sum(counts := [d.compiled() for d in rest]) >= 15 and min(counts) >= 1:
                    for d, n in zip(rest, counts, strict=True):
                        killed[d.addr] = n
                        d.kill()
                    return
            except OSError:
                continue

    watcher = threading.Thread(target=kill_when_busy, daemon=True)
    watcher.start()
    try:
        hermetic(
            "build", "llvm", *tiny, "--variant", "support", "--toolchain", "zig", "--work-dir", str(work), "--cache",
            str(source_cache), "--jobs", str(os.cpu_count() or 2), "--offline", "auto", "--quiet",
            "--distribute", ",".join(d.spec for d in daemons),
        )
        done.set()
        watcher.join()
        yield json.loads((work / "tiny" / "support" / "record.json").read_text()), daemons, killed
    finally:
        done.set()
        for d in daemons:
            d.kill()


def test_a_distributed_build_has_the_tree_of_a_local_one(spread_build: Any, tiny_zig_install: Path) -> None:
    rec, _, _ = spread_build
    plain = json.loads(tiny_zig_install.read_text())
    assert "distributed" not in plain
    assert rec["tree"]["digest"] == plain["tree"]["digest"]
    assert rec["inputs_digest"] == plain["inputs_digest"]  # so substitution and verify match either way


def test_the_hosts_compiled_and_the_record_counts_it_as_they_do(spread_build: Any) -> None:
    rec, daemons, killed = spread_build
    d = rec["distributed"]
    assert [h["address"] for h in d["hosts"]] == [f"{x.addr}:{x.port}" for x in daemons]
    assert all(h["answered"] for h in d["hosts"]) and d["distcc"] == shutil.which("distcc")
    for h, daemon in zip(d["hosts"], daemons, strict=True):
        # as its statistics counted just before the kill: give or take the jobs of its slots (finished between
        # the count and the kill, or finished with their answers never sent)
        assert abs(h["compiles"] - killed[daemon.addr]) <= daemon.slots and h["compiles"] >= 1, (h, killed, daemon.log)
    assert d["remote"] == sum(h["compiles"] for h in d["hosts"]) >= 15
    assert d["jobs"] == (os.cpu_count() or 2) + 5 == rec["jobs"]
    assert d["compilers"] == [distribute.compiler_name(toolchains.for_root(ROOT), lang) for lang in ("cc", "c++")]


def test_hosts_that_die_mid_build_are_compiled_around_and_the_record_says_so(spread_build: Any) -> None:
    rec, daemons, killed = spread_build
    d = rec["distributed"]
    assert sorted(killed) == sorted(x.addr for x in daemons), f"not every daemon was killed: {killed}"
    first = d["hosts"][2]
    # the first one went away while others lived: what it had (or was sent after) came back from it
    assert first["refused"] + first["failed"] >= 1
    # ... and went to another host, or ran here when every other slot was taken: distcc chooses by free
    # slots, so which one is the scheduler's (a CI run had all of them run here). The record says which:
    # a rerouted compile is one a host failed, and the note names it exactly when there is one.
    assert d["rerouted"] <= sum(h["failed"] for h in d["hosts"])
    assert (d["rerouted"] >= 1) == ("on another host" in d["note"]), d["note"]
    # then none was left: the rest compiled here
    assert d["fallbacks"] >= 1 and "fell back to this machine" in d["note"]
    # 35 compiles go through distcc (34 of tiny's and the test_package's main.cpp): CMake's configure compiles,
    # its compiler ABI detection included, never do
    assert d["local"] >= d["fallbacks"] and d["remote"] + d["local"] >= 35


def test_no_configure_compile_went_to_a_host(spread_build: Any) -> None:
    """Their answers decide the configuration; a host compiling preprocessed source may answer differently."""
    rec, _, _ = spread_build
    log = (Path(rec["install_root"]).parent / "distcc.log").read_text()
    assert "completed ok" in log
    for name in ("CMakeCCompilerABI", "CMakeCXXCompilerABI", "CMakeScratch", "CMakeTmp", "CheckSymbolExists"):
        assert name not in log, name


def test_the_record_names_exactly_what_the_build_could_reach(spread_build: Any) -> None:
    rec, daemons, _ = spread_build
    reachable = rec["distributed"]["reachable"]
    addresses = ", ".join(f"{x.addr}:{x.port}" for x in daemons)
    if rec["offline"]["enforced"]:
        assert reachable.startswith(f"compile hosts {addresses}, each through a Unix socket relayed to it alone")
        assert reachable.endswith("no network besides (a fresh network namespace)")
    else:  # a machine without network namespaces: distcc reaches the hosts, and the network, directly
        assert reachable.startswith(f"compile hosts {addresses} directly, and the network")
