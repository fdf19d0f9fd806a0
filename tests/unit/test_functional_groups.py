"""The functional tier's grouping for two processes (.ci/run: `-n 2 --dist loadgroup`): each session build is
made in one process only. Checked on the real collection of tests/functional (collecting runs no fixture)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT

FUNCTIONAL = ROOT / "tests" / "functional"
# Session fixtures of the functional conftest that build nothing: any process may make its own.
CHEAP = {"golden", "wheel_cache"}

PROBE = '''
import json, os
from pathlib import Path

def pytest_collection_finish(session):
    out = []
    for item in session.items:
        marks = [m.args[0] for m in item.iter_markers("xdist_group")]
        defs = []
        for name, fdefs in item._fixtureinfo.name2fixturedefs.items():
            for d in fdefs:
                defs.append([name, d.scope, str(Path(d.func.__code__.co_filename).resolve())])
        out.append({"file": item.nodeid.split("::")[0], "groups": marks, "fixtures": defs})
    Path(os.environ["PROBE_OUT"]).write_text(json.dumps(out))
'''

# Under xdist, each process writes which tests it was given and runs none (no fixture, no build).
SCHEDULE_PROBE = '''
import os
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    with open(os.environ["PROBE_OUT"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + " " + item.nodeid + "\\n")
    return True
'''


def _pytest_functional(d: Path, probe: str, *options: str) -> subprocess.CompletedProcess[str]:
    """pytest on the functional tier with `probe` as a plugin, which writes what it sees to d/out."""
    (d / "tier_probe.py").write_text(probe)
    env = {"PYTHONPATH": f"{d}:{ROOT / 'src'}", "PROBE_OUT": str(d / "out"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "pytest", str(FUNCTIONAL), "-m", "functional", "-q", "-p",
                           "tier_probe", "-p", "no:cacheprovider", *options], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    d = tmp_path_factory.mktemp("groups")
    proc = _pytest_functional(d, PROBE, "--collect-only")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    items: list[dict[str, Any]] = json.loads((d / "out").read_text())
    return items


def _group_of(collected: list[dict[str, Any]]) -> dict[str, str]:
    files: dict[str, set[str]] = {}
    for item in collected:
        files.setdefault(item["file"], set()).update(item["groups"])
    assert all(len(g) == 1 for g in files.values()), {f: g for f, g in files.items() if len(g) != 1}
    return {f: next(iter(g)) for f, g in files.items()}


def test_every_file_has_one_group_and_the_long_builds_are_split(collected: list[dict[str, Any]]) -> None:
    groups = _group_of(collected)
    assert len(groups) > 10, groups
    zig = {f for f, g in groups.items() if g == "zig-builds"}
    host = {f for f, g in groups.items() if g == "host-build"}
    assert {"tests/functional/test_arch_arm64.py", "tests/functional/test_wheel_arm64.py",
            "tests/functional/test_compile_cache_llvm.py"} <= zig
    assert {"tests/functional/test_verify_llvm.py", "tests/functional/test_llvm_second_release.py"} <= host
    others = {f: g for f, g in groups.items() if f not in zig | host}
    assert all(f == g for f, g in others.items()), others  # a file with no session build is a group of its own


def test_no_session_build_is_needed_by_two_groups(collected: list[dict[str, Any]]) -> None:
    """A session fixture of the functional conftest that files of two groups need would be made in both
    processes: only the ones that build nothing may be."""
    groups = _group_of(collected)
    conftest = str((FUNCTIONAL / "conftest.py").resolve())
    users: dict[str, set[str]] = {}
    for item in collected:
        for name, scope, where in item["fixtures"]:
            if scope == "session" and where == conftest:
                users.setdefault(name, set()).add(groups[item["file"]])
    shared = {name: sorted(g) for name, g in users.items() if len(g) > 1 and name not in CHEAP}
    assert not shared, f"session fixtures needed in two processes (add them to BUILD_GROUPS): {shared}"


def test_under_loadgroup_each_group_runs_in_one_process(tmp_path: Path) -> None:
    """.ci/run's own options, the tests given out but not run: xdist must see the groups (it reads them in
    its own collection hook, so ours must come first) and give each group's tests to one process."""
    proc = _pytest_functional(tmp_path, SCHEDULE_PROBE, "-n", "2", "--dist", "loadgroup", "-p", "no:benchmark")
    # 0: the tests were collected and given out (the probe runs none); 5, nothing collected, is a failure here
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    workers: dict[str, set[str]] = {}
    for line in (tmp_path / "out").read_text().splitlines():
        worker, nodeid = line.split(" ", 1)
        assert "@" in nodeid, f"xdist saw no group on {nodeid}"
        workers.setdefault(nodeid.rsplit("@", 1)[1], set()).add(worker)
    assert {"zig-builds", "host-build"} <= set(workers), workers
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["zig-builds"] != workers["host-build"], workers


def test_a_file_needing_two_groups_builds_is_refused() -> None:
    spec = importlib.util.spec_from_file_location("_functional_conftest", FUNCTIONAL / "conftest.py")
    assert spec is not None and spec.loader is not None
    functional_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(functional_conftest)
    with pytest.raises(pytest.UsageError, match="host-build and zig-builds"):
        functional_conftest.group_of_files({"t.py": {"host_verify", "arm64_support_install"}})
    assert functional_conftest.group_of_files({"a.py": {"golden"}, "b.py": {"zig_probe_wheel"}}) == {
        "a.py": "a.py", "b.py": "zig-builds"}
