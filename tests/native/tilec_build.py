"""Build tilec's native core against an LLVM 19 prefix and import it (shared by the test tiers).

The build directory lives in pytest's cache (one per LLVM prefix), so a second
session only re-runs ninja. The package is staged into a temp dir next to the
freshly built `_core`, so the source tree stays clean.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "compiler"
DEFAULT_PREFIX = "/usr/lib/llvm-19"


def llvm_prefix() -> Path:
    return Path(os.environ.get("HERMETIC_TEST_LLVM_PREFIX", DEFAULT_PREFIX))


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")


def build_core(config: pytest.Config) -> Path:
    """Configure + build with CMake/Ninja; returns the built `_core` extension's path (the
    launch extension, `_launch`, and the cache reader, `_hit`, are built beside it)."""
    prefix = llvm_prefix()
    cmake_dir = prefix / "lib" / "cmake" / "llvm"
    if not (cmake_dir / "LLVMConfig.cmake").is_file():
        raise RuntimeError(
            f"no LLVMConfig.cmake under {prefix}; set HERMETIC_TEST_LLVM_PREFIX to an LLVM 19 "
            "prefix (CI: apt-get install llvm-19-dev)"
        )
    # X86 too: the CPU example backend lowers through it (AUTO would pick it up
    # from Debian's LLVM anyway; ON makes a prefix without X86 fail loudly).
    defines = [f"-DTILEC_WITH_X86={os.environ.get('HERMETIC_TEST_TILEC_X86', 'ON')}"]
    tag = hashlib.sha256(f"{prefix.resolve()}|{sys.executable}|{defines}".encode()).hexdigest()[:12]
    override = os.environ.get("HERMETIC_TEST_BUILD_DIR")
    if override:
        build = Path(override) / f"tilec-build-{tag}"
        build.mkdir(parents=True, exist_ok=True)
    elif getattr(config, "cache", None) is not None:
        build = config.cache.mkdir(f"tilec-build-{tag}")
    else:
        build = Path(tempfile.mkdtemp(prefix=f"tilec-build-{tag}-"))
    if not (build / "build.ninja").is_file():
        _run(
            [
                "cmake",
                "-G",
                "Ninja",
                "-S",
                str(SRC),
                "-B",
                str(build),
                f"-DLLVM_DIR={cmake_dir}",
                f"-DPython_EXECUTABLE={sys.executable}",
                "-DCMAKE_BUILD_TYPE=Release",
                *defines,
            ],
            REPO,
        )
    jobs = os.environ.get("HERMETIC_TEST_JOBS", "2")
    _run(["cmake", "--build", str(build), "-j", jobs], REPO)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    built = [p for p in build.glob("_core*.so") if p.name.endswith(suffix) or ".abi3." in p.name]
    if len(built) != 1:
        raise RuntimeError(f"expected one _core extension in {build}, found {built}")
    return built[0]


def import_tilec(config: pytest.Config, stage_root: Path) -> ModuleType:
    """Import an installed tilec if TILEC_TEST_INSTALLED=1, else build and stage it."""
    if os.environ.get("TILEC_TEST_INSTALLED") == "1":
        return importlib.import_module("tilec")
    core = build_core(config)
    pkg = stage_root / "tilec"
    shutil.copytree(
        SRC / "tilec",
        pkg,
        ignore=shutil.ignore_patterns("_core*.so", "_launch*.so", "_hit*.so", "__pycache__"),
    )
    shutil.copy2(core, pkg / core.name)
    for built in (*core.parent.glob("_launch*.so"), *core.parent.glob("_hit*.so")):
        shutil.copy2(built, pkg / built.name)
    info = core.parent / "_build_info.py"
    if info.is_file():
        shutil.copy2(info, pkg / info.name)
    for name in [m for m in sys.modules if m == "tilec" or m.startswith("tilec.")]:
        del sys.modules[name]
    sys.path.insert(0, str(stage_root))
    return importlib.import_module("tilec")
