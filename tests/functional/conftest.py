"""The functional tier's real LLVM builds: each distinct build once per session, shared by every test that needs it.

Each fixture says what it costs on the 2-core dev machine and who shares it. The digests the builds must give,
measured elsewhere, are in tests/golden/digests.json. HERMETIC_TEST_<NAME>=RECORD reuses a finished build of
the same kind for local runs (CI never sets them).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.servers import Distccd
from helpers import ROOT, SharedBuilds, hermetic, run_hermetic
from hermetic.model import record

LLVM = ROOT / "recipes" / "llvm"
GOLDEN = ROOT / "tests" / "golden"
JOBS = str(os.cpu_count() or 2)


@pytest.fixture(scope="session")
def golden() -> dict[str, Any]:
    """tests/golden/digests.json's digests, by name."""
    data: dict[str, Any] = json.loads((GOLDEN / "digests.json").read_text())["digests"]
    return data


# The session builds, by the process that makes them: .ci/run runs this tier on two processes with
# `--dist loadgroup`, and every file that needs a build of a group goes to that group's process, so no build is
# made twice (xdist starts each process's session fixtures anew). Two groups whose builds take about as long
# keep both processes busy while each build's configure, packaging and tests leave a core idle. A file outside
# them is a group of its own, so its module fixtures stay in one process too. A new session build belongs in
# one of these sets; left out, it would be built once per process that needs it.
BUILD_GROUPS = {
    "zig-builds": {"zig_support_install", "arm64_support_install", "zig_probe_wheel", "compile_hosts"},
    "host-build": {"host_verify", "support_install"},
}


def group_of_files(needs: dict[str, set[str]]) -> dict[str, str]:
    """Each test file's group, from the fixtures its tests need (their whole closure). A file needing builds
    of two groups is an error: its tests would make one group's builds in both processes."""
    groups = {}
    for path, names in needs.items():
        hit = sorted(g for g, builds in BUILD_GROUPS.items() if names & builds)
        if len(hit) > 1:
            raise pytest.UsageError(f"{path} needs the session builds of {' and '.join(hit)}: split the file, or "
                                    "move one build into the other group (tests/functional/conftest.py)")
        groups[path] = hit[0] if hit else path
    return groups


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the tests' ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks this tier's tests with their file's xdist group (used only under `--dist loadgroup`)."""
    here = Path(__file__).resolve().parent
    mine = [item for item in items if Path(str(item.path)).resolve().parent == here]
    needs: dict[str, set[str]] = {}
    for item in mine:
        needs.setdefault(item.nodeid.split("::")[0], set()).update(getattr(item, "fixturenames", ()))
    groups = group_of_files(needs)
    for item in mine:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid.split("::")[0]]))


def _given(name: str) -> Path | None:
    value = os.environ.get(f"HERMETIC_TEST_{name}")
    return Path(value) if value else None


@pytest.fixture(scope="session")
def compile_host(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> Path:
    """A compile host's directory, set up as a user would (`hermetic toolchain compile-host`): its bin/ goes on
    distccd's PATH."""
    base = tmp_path_factory.mktemp("compile-host")
    proc = hermetic("toolchain", "compile-host", str(base), "--cache", str(source_cache), "--toolchain", "zig")
    names = json.loads(proc.stdout)["compilers"]
    assert sorted(p.name for p in (base / "bin").iterdir()) == sorted(names)
    return base / "bin"


@pytest.fixture(scope="session")
def compile_hosts(tmp_path_factory: pytest.TempPathFactory, compile_host: Path) -> Iterator[list[Distccd]]:
    """Three distccd on 127.0.0.2, .3 and .4 (2, 2 and 1 slots) for the session."""
    base = tmp_path_factory.mktemp("distccd")
    daemons = [Distccd("127.0.0.2", base, compile_host), Distccd("127.0.0.3", base, compile_host),
               Distccd("127.0.0.4", base, compile_host, slots=1)]
    yield daemons
    for d in daemons:
        d.kill()


@pytest.fixture(scope="session")
def zig_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of a file:// compile cache, empty until `zig_support_install` fills it."""
    store = tmp_path_factory.mktemp("zig-compile-cache") / "store"
    store.mkdir()  # a shared directory that exists: the cache answers from the first compile
    return store


@pytest.fixture(scope="session")
def zig_support_install(
    builds: SharedBuilds, zig_compile_cache: Path, compile_hosts: list[Distccd]
) -> Path:
    """record.json of `support` with the pinned zig toolchain, cold: the golden digest is its point. Its compiles
    go through a fresh file:// compile cache, whose misses (all of them) spread over `compile_hosts`: it is also
    the cold half of test_compile_cache_llvm.py's pair and the real build of test_distribute_llvm.py, and neither
    may change a digest. About 4 minutes on 2 cores; the zig wheels and the warm build use it.
    """
    given = _given("ZIG_SUPPORT")
    if given is not None:
        return given
    hosts = ",".join(d.spec for d in compile_hosts)
    rec = builds.get(LLVM, "support", "zig", extra=("--compile-cache", f"file://{zig_compile_cache}",
                                                    "--distribute", hosts), label="zig-support")
    assert (json.loads(rec.read_text()).get("toolchain_id") or {}).get("kind") == "zig", f"{rec} is not a zig build"
    return rec


@pytest.fixture(scope="session")
def arm64_support_install(builds: SharedBuilds) -> Path:
    """record.json of `support` cross-built for arm64 with zig, its test_package run under qemu: about twice the
    CPU of the zig amd64 build (tablegen is built for this machine too). test_arch_arm64.py and the arm64 wheels."""
    if os.uname().machine != "x86_64":
        pytest.skip("the cross build is from x86_64: the pinned ziglang wheel is the x86_64 one")
    return _given("ARM64_SUPPORT") or builds.get(LLVM, "support", "zig", arch="arm64", label="arm64-support")


def _foreign_tools(d: Path) -> dict[str, str]:
    """A PATH whose first cmake and ninja are not the pinned ones (they would fail the build), and whose python3
    finds yaml and pygments: LLVM's configure probes for both and writes the answer into LLVMConfig.cmake unless
    the recipe answers it."""
    bin_dir, site = d / "bin", d / "site"
    (site / "pygments" / "lexers").mkdir(parents=True)
    bin_dir.mkdir()
    for mod in ("yaml.py", "pygments/__init__.py", "pygments/lexers/__init__.py", "pygments/lexers/c_cpp.py"):
        (site / mod).write_text("")
    for tool in ("cmake", "ninja"):
        (bin_dir / tool).write_text("#!/bin/sh\necho 'cmake version 3.25.1'; exit 97\n")
        (bin_dir / tool).chmod(0o755)
    python = shutil.which("python3") or sys.executable
    (bin_dir / "python3").write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {python} "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.fixture(scope="session")
def host_verify(tmp_path_factory: pytest.TempPathFactory, source_cache: Path) -> dict[str, Any]:
    """`hermetic verify` of the committed record of a host `support` build made on a Debian 12 dev machine
    (tests/golden/llvm-support-host-debian12.record.json): rebuilt here, later, in another directory, cwd and
    umask, from the whole release archive (--from-release), with foreign cmake, ninja and python3 first on PATH,
    offline, and kept. The one cold host build of the session: it is the golden digest's test, verify's on a real
    build, and `support_install` for test_llvm_build.py. About 5 minutes on 2 cores.

    Returns verify's exit code, its JSON report and the rebuild's record path."""
    base = tmp_path_factory.mktemp("host-verify")
    rebuild, cwd = base / "elsewhere" / "rebuild", base / "cwd"
    cwd.mkdir()
    proc = hermetic(
        "verify", str(GOLDEN / "llvm-support-host-debian12.record.json"), "--work-dir", str(base / "empty-work"),
        "--cache", str(source_cache), "--rebuild-dir", str(rebuild), "--keep", "--json", "--jobs", JOBS,
        "--offline", "require", "--from-release", cwd=cwd, env=_foreign_tools(base / "foreign"), check=False,
        umask=0o077,
    )
    assert proc.returncode in (0, 8), (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    rec = rebuild / "work" / "llvm" / "support" / "record.json"
    assert rec.is_file(), proc.stderr[-3000:]
    return {"rc": proc.returncode, "report": json.loads(proc.stdout), "record": rec, "base": base, "stderr": proc.stderr}


@pytest.fixture(scope="session")
def support_install(host_verify: dict[str, Any]) -> Path:
    """record.json of the host `support` build: the rebuild `host_verify` kept (built from the whole release archive).
    test_llvm_build.py checks it; test_llvm_second_release.py builds 22.1.8 beside it in its work dir."""
    path: Path = host_verify["record"]
    assert record.load_build_record(path).toolchain_ref.kind == "host"
    return path


@pytest.fixture(scope="session")
def wheel_cache(source_cache: Path) -> Path:
    """The source cache with the wheel recipes' pinned build requirements in its wheelhouse (fetched once)."""
    run_hermetic("wheelhouse", "--root", str(ROOT), "--cache", str(source_cache), cwd=ROOT)
    return source_cache


# --- llvmprobe's wheel against the zig `support` tree, built once -----------------------------------------

PROBE_PROJECT = ROOT / "tests" / "functional" / "projects" / "llvmprobe"


@pytest.fixture(scope="session")
def zig_probe_wheel(tmp_path_factory: pytest.TempPathFactory, zig_support_install: Path, source_cache: Path) -> dict[str, Any]:
    """llvmprobe's amd64 wheel against `zig_support_install`, built with no --toolchain (the LLVM's record says
    zig) in that LLVM's work dir, from a working directory of its own.

    test_wheel_zig.py checks this wheel and has `hermetic verify` rebuild it elsewhere; test_wheel_arm64.py
    compares the arm64 wheel's answers under qemu with this one's. Their builds had the same project, tree,
    toolchain, Python and jobs, and gave the same sha256 (a fresh work dir changes none of it): one build of
    about 12 s on 2 cores, once zig's runtimes are in the source cache, serves both.
    """
    if os.uname().machine != "x86_64":
        pytest.skip("the pinned ziglang wheel is the x86_64 one")
    llvm = record.load_build_record(zig_support_install)
    work = zig_support_install.parents[2]  # <work>/llvm/support/record.json: zig's cache of that work dir
    base = tmp_path_factory.mktemp("zigwheel")
    run_hermetic("wheelhouse", "--root", str(ROOT), "--cache", str(source_cache), cwd=ROOT)
    (base / "cwd-a").mkdir()
    proc = run_hermetic(
        "wheel", str(PROBE_PROJECT), "--llvm", str(llvm.install_dir), "--work-dir", str(work), "--output",
        str(base / "dist"), "--root", str(ROOT), "--cache", str(source_cache), "--jobs", str(os.cpu_count() or 2),
        "--offline", "auto", cwd=base / "cwd-a",
    )
    printed = json.loads(proc.stdout)
    return {
        "printed": printed, "wheel": base / "dist" / printed["wheel"], "stderr": proc.stderr,
        "record": json.loads((base / "dist" / "wheel-record.json").read_text()), "work": work, "base": base, "llvm": llvm,
    }
