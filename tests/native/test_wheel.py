"""`hermetic wheel src/compiler --llvm PREFIX`, for real: offline, reproducible, honestly tagged, importable.

The compiler core is built against an LLVM 19 prefix (Debian's llvm-19-dev, or HERMETIC_TEST_LLVM_PREFIX), then
rebuilt by `hermetic verify` from its record in another, deeper work dir, from another working directory and under
another umask (conftest.py's `tilec_wheel` and `tilec_wheel_rebuilt`); the wheels must be the same bytes. The
wheelhouse is filled once (from PyPI, or already in the cache) and every build runs with --no-index inside the
network namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFIX = Path(os.environ.get("HERMETIC_TEST_LLVM_PREFIX", "/usr/lib/llvm-19"))


@pytest.fixture(scope="module")
def two_builds(tilec_wheel: dict[str, Any], tilec_wheel_rebuilt: dict[str, Any]) -> list[dict[str, Any]]:
    return [tilec_wheel, tilec_wheel_rebuilt]


def test_two_builds_are_identical(two_builds: list[dict[str, Any]]) -> None:
    a, b = two_builds
    assert a["work"] != b["work"]
    assert a["wheel"].name == b["wheel"].name
    assert a["wheel"].read_bytes() == b["wheel"].read_bytes(), "the wheel differs between two builds"
    import hashlib

    digest = hashlib.sha256(a["wheel"].read_bytes()).hexdigest()
    assert a["record"]["sha256"] == b["record"]["sha256"] == a["printed"]["sha256"] == digest
    assert b["rc"] == 0 and b["report"]["match"] is True, b["stderr"][-3000:]
    print(f"\nwheel {a['wheel'].name} sha256 {digest}; build times {a['record']['timings_s']} / {b['record']['timings_s']}")


def test_record_says_what_was_built_and_how(two_builds: list[dict[str, Any]]) -> None:
    rec = two_builds[0]["record"]
    assert rec["schema"] == "hermetic.wheel-record/1"
    assert rec["llvm"]["prefix"] == str(PREFIX) and rec["llvm"]["version"].startswith("19.")
    assert rec["source_date_epoch"] > 0
    pinned = {p["name"] for p in rec["build_requirements"]["pinned"]}
    assert {"scikit-build-core", "nanobind", "cmake", "ninja"} <= pinned
    assert set(rec["offline"]) == {"enforced", "method", "reason"}
    assert rec["glibc_required"] and rec["glibc_required"].startswith("2.")
    # the second build reused nothing from the first: its venv is its own
    assert two_builds[1]["record"]["timings_s"]["venv_reused"] is False


def test_zip_is_normalised(two_builds: list[dict[str, Any]]) -> None:
    rec = two_builds[0]["record"]
    with zipfile.ZipFile(two_builds[0]["wheel"]) as z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        assert names[-1].endswith(".dist-info/RECORD")
        body = [n for n in names if ".dist-info/" not in n]
        assert body == sorted(body)
        assert any(n.startswith("tilec/_core") and n.endswith(".so") for n in names)
        assert any(n.startswith("tilec/_launch") and n.endswith(".so") for n in names)  # the launch path
        import time

        stamp = time.gmtime(rec["source_date_epoch"])[:6]
        for i in infos:
            assert i.date_time == stamp
            assert (i.external_attr >> 16) & 0o777 in (0o644, 0o755)


def test_tag_is_what_auditwheel_reports(two_builds: list[dict[str, Any]]) -> None:
    built = two_builds[0]
    venvs = sorted((built["work"] / "wheel" / "venv").glob("*/bin/auditwheel"))
    assert venvs, "the build venv has no auditwheel (it is a pinned build requirement)"
    proc = subprocess.run([str(venvs[0]), "show", "--json", str(built["wheel"])], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    platform_tag = built["record"]["tag"].split("-", 2)[2]
    assert platform_tag == report["overall_tag"]
    assert built["record"]["platform_tag"]["from"] == "auditwheel"
    glibc = [v for v in report["versioned_symbols"].get("libc.so.6", []) if v.startswith("GLIBC_2.")]
    newest = max(glibc, key=lambda v: tuple(int(x) for x in v[len("GLIBC_"):].split(".")))
    assert built["record"]["glibc_required"] == newest[len("GLIBC_"):]
    if platform_tag.startswith("manylinux"):
        assert not report["external_libs"]


def test_wheel_installs_and_imports(two_builds: list[dict[str, Any]], tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
         str(two_builds[0]["wheel"])],
        check=True, capture_output=True, text=True,
    )
    code = (
        "import json, tilec._core as c, tilec._launch as l; "
        "print(json.dumps({'file': c.__file__, 'llvm': c.llvm_version(), 'targets': c.registered_targets(), "
        "'launch': l.__file__, 'driver_loaded': l.driver_loaded()}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": os.environ.get("PATH", "")},
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["file"].startswith(str(target)) and info["launch"].startswith(str(target))
    assert info["driver_loaded"] is False  # importing loads no libcuda
    assert info["llvm"].startswith("19."), info
    assert any("nvptx" in t.lower() for t in info["targets"]), info
