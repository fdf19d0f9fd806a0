"""`hermetic wheel --arch arm64`, for real: a manylinux_2_28_aarch64 wheel cross-built on this x86_64 machine
with the pinned zig toolchain, against an arm64 LLVM tree, for an arm64 CPython 3.11 of Debian's packages
(a root made by devtools/debian_root.py from the machine's apt sources), imported by that Python under
qemu-aarch64-static and compared with the amd64 wheel's answers.

What CI affords (2 cores; it already builds the arm64 and the zig `support` trees for other tests): the
`llvmprobe` project (LLVMSupport + LLVMDemangle, like tilec's binding layer) against the arm64 `support`
tree, checked by auditwheel, rebuilt by `hermetic verify` in another directory to the same sha256, and
imported under qemu, where its calls into LLVM must answer as the amd64 wheel's do natively.

tilec itself needs the `nvptx` variant (85 minutes on 2 cores, per architecture): with
HERMETIC_TEST_NVPTX_ARM64 and HERMETIC_TEST_NVPTX_AMD64 naming the install prefixes of the two trees
(PREFIX = install_root + prefix of each record.json) the tilec wheels are built for both, and kernels lowered
by the arm64 wheel under qemu must give the amd64 wheel's PTX byte for byte; without them those tests skip,
saying so. bench/arm64_wheel_report.py measures the same for reports/arm64-wheel.json.

Cost on the idle 2-core dev machine in a fresh-clone CI run: the root and the arm64 llvmprobe wheel about
31 s (zig's runtimes for the target are in the source cache since the arm64 LLVM build; the amd64 wheel is
test_wheel_zig.py's, the session's `zig_probe_wheel`), the verify rebuild about 13 s: under a minute for the
three CI tests, with the support trees and the amd64 wheel given. The two tilec tests: 297 s, nearly
all of it the two tilec wheels (the PTX comparison under qemu 8 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from devtools.debian_root import make_root
from helpers import ROOT, run_hermetic
from hermetic.core import platforms
from hermetic.model import record, toolchains

PLATFORM = "manylinux_2_28_aarch64"
ARM = platforms.PLATFORMS["arm64"]
PROBE_PROJECT = ROOT / "tests" / "functional" / "projects" / "llvmprobe"
PTX_PROBE = ROOT / "tests" / "functional" / "tilec_ptx_probe.py"
RUNTIME = ROOT / "tests" / "functional" / "tilec-runtime-arm64.txt"
PY_ARM = "cp311"  # Debian 12's python3.11: what the root holds

# llvmprobe's calls, answered by the same LLVM code on both architectures
PROBE_CALLS = """
import json, platform, llvmprobe as p
symbols = ["_ZNK4llvm9StringRef5lowerEv", "_ZN4llvm11raw_ostreamlsEPKc", "_Z3fooILi3EEvv", "not-mangled",
           "_ZNSt6vectorIiSaIiEE9push_backERKi"]
blobs = [b"", b"a", b"hermetic", bytes(range(256)), b"\\xff" * 1000]
print(json.dumps({"machine": platform.machine(), "llvm": p.llvm_version(),
                  "demangle": [p.demangle(s) for s in symbols], "xxh3": [p.xxh3(b) for b in blobs]}))
"""



def _prefix(record_path: Path) -> Path:
    rec = record.load_build_record(record_path)
    return rec.install_dir


@pytest.fixture(scope="module")
def arm64_python(source_cache: Path) -> Path:
    """python3.11 of an arm64 root of Debian's packages (kept in the cache: apt gives the same packages)."""
    if platform.machine() != "x86_64":
        pytest.skip("the cross build is from x86_64: the pinned ziglang wheel is the x86_64 one")
    if shutil.which(ARM.emulator[0]) is None:
        pytest.fail(f"{ARM.emulator[0]} is not on PATH: apt-get install {' '.join(ARM.packages)} (.ci/setup does)")
    root = make_root(source_cache / "debian-roots" / "arm64-python3.11", "arm64")
    return root / "usr" / "bin" / "python3.11"


def _qemu(python: Path) -> list[str]:
    return [ARM.emulator[0], "-L", str(toolchains.program_root(python, ARM)), str(python)]


def _site(wheels: list[Path], dest: Path, platform_args: list[str]) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-index", "--target", str(dest), *platform_args, *map(str, wheels)], check=True)
    return dest


ARM_PIP = ["--platform", PLATFORM, "--python-version", "3.11", "--implementation", "cp", "--abi", PY_ARM,
           "--only-binary=:all:"]


def _run_python(argv: list[str], site: Path, code_or_script: list[str]) -> dict[str, Any]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site), "LC_ALL": "C", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([*argv, *code_or_script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}"
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _auditwheel_show(work: Path, wheel: Path) -> dict[str, Any]:
    tools = sorted((work / "wheel" / "venv").glob("*/bin/auditwheel"))
    assert tools, f"the build venv under {work} has no auditwheel"
    proc = subprocess.run([str(tools[0]), "show", "--json", str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def _build(project: Path, llvm: Path, work: Path, out: Path, cache: Path, *extra: str) -> dict[str, Any]:
    (work).mkdir(parents=True, exist_ok=True)
    proc = run_hermetic("wheel", str(project), "--llvm", str(llvm), "--work-dir", str(work), "--output", str(out),
                        "--root", str(ROOT), "--cache", str(cache), "--jobs", str(os.cpu_count() or 2),
                        "--offline", "auto", *extra, cwd=work)
    printed: dict[str, Any] = json.loads(proc.stdout)
    printed["path"] = Path(printed["path"])
    printed["record_data"] = json.loads((out / "wheel-record.json").read_text())
    printed["work"] = work
    printed["stderr"] = proc.stderr
    return printed


# --- what CI runs: llvmprobe against the arm64 `support` tree -------------------------------------------


@pytest.fixture(scope="module")
def probe_wheels(tmp_path_factory: pytest.TempPathFactory, arm64_python: Path, arm64_support_install: Path,
                 zig_probe_wheel: dict[str, Any], source_cache: Path) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("arm64wheel")
    run_hermetic("wheelhouse", "--root", str(ROOT), "--cache", str(source_cache), cwd=ROOT)
    arm = _build(PROBE_PROJECT, _prefix(arm64_support_install), base / "arm-work", base / "arm-dist", source_cache,
                 "--arch", "arm64", "--python", str(arm64_python))
    # The amd64 side is only what the arm64 wheel's answers are held to: test_wheel_zig.py's wheel (the session's
    # zig_probe_wheel) is that build, of the same project against the zig `support` tree with the same toolchain,
    # Python and jobs; an own build of it here gave the same sha256.
    return {"arm": arm, "amd": zig_probe_wheel["wheel"], "base": base, "python": arm64_python, "cache": source_cache}


def test_the_arm64_probe_wheel_is_tagged_manylinux_2_28_aarch64_as_auditwheel_agrees(probe_wheels: dict[str, Any]) -> None:
    arm = probe_wheels["arm"]
    assert arm["wheel"] == f"llvmprobe-0.1.0-{PY_ARM}-{PY_ARM}-{PLATFORM}.whl"
    rec = arm["record_data"]
    assert rec["platform_tag"]["from"] == f"auditwheel repair --plat {PLATFORM}"
    assert rec["toolchain_id"]["target"] == "aarch64-linux-gnu.2.28"
    assert rec["python"]["arch"] == "arm64" and rec["python"]["executable"] == str(probe_wheels["python"])
    assert rec["python"]["build_executable"] and rec["machine"] == "linux-x86_64"
    report = _auditwheel_show(arm["work"], arm["path"])
    m = re.fullmatch(r"manylinux_2_(\d+)_aarch64", report["overall_tag"])
    assert m and int(m.group(1)) <= 28, report["overall_tag"]
    assert not report["external_libs"]
    with zipfile.ZipFile(arm["path"]) as z:
        (so,) = [n for n in z.namelist() if n.endswith(".so")]
        data = z.read(so)
    assert so.endswith(".cpython-311-aarch64-linux-gnu.so"), so
    assert toolchains.elf_machine(data[:20]) == ARM.elf_machine
    assert b"zig-cache" not in data and str(arm["work"]).encode() not in data


def test_the_arm64_probe_wheel_answers_under_qemu_as_the_amd64_one_does_natively(
    probe_wheels: dict[str, Any], tmp_path: Path
) -> None:
    arm_site = _site([probe_wheels["arm"]["path"]], tmp_path / "arm-site", ARM_PIP)
    amd_site = _site([probe_wheels["amd"]], tmp_path / "amd-site", [])
    arm = _run_python(_qemu(probe_wheels["python"]), arm_site, ["-c", PROBE_CALLS])
    amd = _run_python([sys.executable], amd_site, ["-c", PROBE_CALLS])
    assert arm.pop("machine") == "aarch64" and amd.pop("machine") == "x86_64"
    assert arm == amd
    assert arm["llvm"] == "19.1.7" and arm["demangle"][0] == "llvm::StringRef::lower() const"
    assert arm["xxh3"][0] == 0x2D06800538D394C2  # XXH3_64bits of no bytes


def test_the_arm64_probe_wheel_rebuilt_elsewhere_is_the_same_bytes(probe_wheels: dict[str, Any]) -> None:
    arm = probe_wheels["arm"]
    rebuild = probe_wheels["base"] / "elsewhere" / "rebuild"
    cwd = probe_wheels["base"] / "cwd-verify"
    cwd.mkdir()
    proc = run_hermetic("verify", str(arm["path"]), "--rebuild-dir", str(rebuild), "--keep", "--json",
                        "--root", str(ROOT), "--cache", str(probe_wheels["cache"]), "--offline", "auto", cwd=cwd)
    report = json.loads(proc.stdout)
    assert report["match"] is True, report
    again = rebuild / "dist" / arm["wheel"]
    assert hashlib.sha256(again.read_bytes()).hexdigest() == arm["sha256"]


# --- tilec against the two `nvptx` trees: where they are given -------------------------------------------


@pytest.fixture(scope="module")
def nvptx_prefixes() -> tuple[Path, Path]:
    arm, amd = os.environ.get("HERMETIC_TEST_NVPTX_ARM64"), os.environ.get("HERMETIC_TEST_NVPTX_AMD64")
    if not (arm and amd):
        pytest.skip("tilec's arm64 wheel needs the nvptx LLVM trees (85 min each on 2 cores, not built on CI): set "
                    "HERMETIC_TEST_NVPTX_ARM64 and HERMETIC_TEST_NVPTX_AMD64 to their install prefixes "
                    "(`hermetic build llvm --arch arm64` / `--arch amd64`, install_root + prefix of each record.json)")
    return Path(arm), Path(amd)


@pytest.fixture(scope="module")
def tilec_wheels(tmp_path_factory: pytest.TempPathFactory, nvptx_prefixes: tuple[Path, Path], arm64_python: Path,
                 source_cache: Path) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("tilec-arm64")
    project = ROOT / "src" / "compiler"
    run_hermetic("wheelhouse", "--root", str(ROOT), "--cache", str(source_cache), cwd=ROOT)
    arm = _build(project, nvptx_prefixes[0], base / "arm-work", base / "arm-dist", source_cache,
                 "--arch", "arm64", "--python", str(arm64_python))
    amd = _build(project, nvptx_prefixes[1], base / "amd-work", base / "amd-dist", source_cache)
    deps = base / "deps"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--require-hashes",
                    "--no-deps", *ARM_PIP, "-r", str(RUNTIME), "-d", str(deps)], check=True)
    return {"arm": arm, "amd": amd, "deps": sorted(deps.glob("*.whl")), "python": arm64_python, "base": base}


def test_tilec_s_arm64_wheel_is_manylinux_2_28_aarch64(tilec_wheels: dict[str, Any]) -> None:
    arm = tilec_wheels["arm"]
    assert arm["wheel"] == f"tilec-0.1.0-{PY_ARM}-{PY_ARM}-{PLATFORM}.whl"
    report = _auditwheel_show(arm["work"], arm["path"])
    m = re.fullmatch(r"manylinux_2_(\d+)_aarch64", report["overall_tag"])
    assert m and int(m.group(1)) <= 28 and not report["external_libs"], report


def test_tilec_s_arm64_wheel_lowers_kernels_to_the_amd64_wheel_s_ptx(tilec_wheels: dict[str, Any], tmp_path: Path) -> None:
    arm_site = _site([tilec_wheels["arm"]["path"], *tilec_wheels["deps"]], tmp_path / "arm-site", ARM_PIP)
    amd_site = _site([tilec_wheels["amd"]["path"]], tmp_path / "amd-site", [])
    arm = _run_python(_qemu(tilec_wheels["python"]), arm_site, [str(PTX_PROBE), str(tmp_path / "arm-cache")])
    amd = _run_python([sys.executable], amd_site, [str(PTX_PROBE), str(tmp_path / "amd-cache")])
    assert arm["machine"] == "aarch64" and amd["machine"] == "x86_64"
    assert arm["tilec"].startswith(str(arm_site)) and amd["tilec"].startswith(str(amd_site))
    assert set(arm["ptx"]) == set(amd["ptx"]) and len(arm["ptx"]) == 4
    for key, text in amd["ptx"].items():
        assert ".visible .entry" in text
        assert arm["ptx"][key] == text, f"{key}: the arm64 wheel's PTX differs from the amd64 wheel's"
