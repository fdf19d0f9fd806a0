from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from helpers import ROOT, run_hermetic

HERE = Path(__file__).resolve().parent
PTXAS = Path("/usr/local/cuda/bin/ptxas")
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_tilec_tests_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


build = _load("tilec_build")
kernels_mod = _load("kernels")


@pytest.fixture(scope="session")
def tilec(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return build.import_tilec(request.config, tmp_path_factory.mktemp("tilec-stage"))


@pytest.fixture(scope="session")
def kernels() -> ModuleType:
    return kernels_mod


@pytest.fixture(scope="session")
def ptxas_path() -> Path:
    found = shutil.which("ptxas") or (str(PTXAS) if PTXAS.is_file() else None)
    if found is None:
        pytest.fail("ptxas is required by the native tier (CUDA toolkit at /usr/local/cuda)")
    return Path(found)


@pytest.fixture
def settings_env(tmp_path: Path, ptxas_path: Path) -> dict[str, str]:
    """The environment `settings` is made from: a private cache dir and the real ptxas."""
    return {
        "TILEC_CACHE_DIR": str(tmp_path / "cache"),
        "TILEC_PTXAS": str(ptxas_path),
        "CUDA_HOME": str(ptxas_path.parent.parent),
        "PATH": "",
    }


@pytest.fixture
def child_env(tilec: ModuleType, settings_env: dict[str, str]) -> dict[str, str]:
    """The environment of a child process that imports this tilec with the test's settings."""
    return {**os.environ, **settings_env, "PYTHONPATH": str(Path(tilec.__file__).resolve().parent.parent)}


@pytest.fixture
def settings(tilec: ModuleType, settings_env: dict[str, str]) -> object:
    """Settings with a private cache dir and the real ptxas."""
    return tilec.Settings.from_env(settings_env)


@pytest.fixture(scope="session")
def cc() -> str:
    found = shutil.which("gcc") or shutil.which("cc")
    if found is None:
        pytest.fail("the native tier needs gcc (build-essential)")
    if not (CUDA_INCLUDE / "cuda.h").is_file():
        pytest.fail(f"the native tier needs the CUDA headers at {CUDA_INCLUDE}")
    return found


@pytest.fixture(scope="session")
def fake_cuda(cc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a fake libcuda.so.1 (aot/fake_cuda.c) that counts and prints calls."""
    out = tmp_path_factory.mktemp("fake-cuda")
    _shared_library(
        cc, "aot/fake_cuda.c", out / "libcuda.so.1", "-pedantic", f"-I{CUDA_INCLUDE}", "-Wl,-soname,libcuda.so.1"
    )
    return out


def _shared_library(cc: str, source: str, target: Path, *flags: str) -> None:
    """Build one of the tests' C sources (under tests/native) into a shared library."""
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared", *flags]
    cmd += ["-o", str(target), str(HERE / source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="session")
def fake_dlpack(cc: str, tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The Python module aot/fake_dlpack.c builds: array types that offer DLPack's C exchange
    table, as torch >= 2.10 does, without torch."""
    import sysconfig

    target = tmp_path_factory.mktemp("fake-dlpack") / f"fake_dlpack{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    _shared_library(cc, "aot/fake_dlpack.c", target, f"-I{sysconfig.get_paths()['include']}")
    spec = importlib.util.spec_from_file_location("fake_dlpack", target)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the compiler core's wheel against LLVM 19 (Debian's llvm-19-dev in CI), built twice ------------

PREFIX = Path(os.environ.get("HERMETIC_TEST_LLVM_PREFIX", "/usr/lib/llvm-19"))




@pytest.fixture(scope="session")
def wheel_cache(source_cache: Path) -> Path:
    """The cache holding the filled wheelhouse (downloaded once, verified every time)."""
    if not (PREFIX / "lib" / "cmake" / "llvm" / "LLVMConfig.cmake").is_file():
        pytest.fail(f"no LLVM 19 at {PREFIX}: apt-get install llvm-19-dev or set HERMETIC_TEST_LLVM_PREFIX")
    run_hermetic("wheelhouse", "--root", str(ROOT), "--cache", str(source_cache), cwd=ROOT)
    return source_cache


@pytest.fixture(scope="session")
def tilec_wheel(tmp_path_factory: pytest.TempPathFactory, wheel_cache: Path) -> dict[str, Any]:
    """The compiler core's wheel against PREFIX, built once from a snapshot of src/compiler (an edit of the
    checkout meanwhile cannot change it): about 2 minutes on 2 cores. `tilec_wheel_rebuilt` is its second build."""
    snap = tmp_path_factory.mktemp("project") / "a" / "compiler"
    shutil.copytree(ROOT / "src" / "compiler", snap, ignore=shutil.ignore_patterns("build", "__pycache__", "*.so"))
    base = tmp_path_factory.mktemp("wheel-a")
    work, cwd = base / "w", base / "cwd"
    cwd.mkdir()
    proc = run_hermetic(
        "wheel", str(snap), "--llvm", str(PREFIX), "--root", str(ROOT), "--cache", str(wheel_cache), "--work-dir",
        str(work), "--output", str(base / "dist"), "--jobs", os.environ.get("HERMETIC_TEST_JOBS", "2"), "--offline",
        "auto", cwd=cwd,
    )
    printed = json.loads(proc.stdout)
    rec = json.loads((base / "dist" / "wheel-record.json").read_text())
    return {"printed": printed, "record": rec, "wheel": base / "dist" / rec["wheel"], "work": work}


@pytest.fixture(scope="session")
def tilec_wheel_rebuilt(tmp_path_factory: pytest.TempPathFactory, tilec_wheel: dict[str, Any], wheel_cache: Path) -> dict[str, Any]:
    """`hermetic verify` of `tilec_wheel`: rebuilt from its wheel-record.json in a deeper work dir, from another
    cwd, under umask 077, and kept. The second of the two builds whose wheels must be the same bytes (the
    project is copied into each build's work dir, so where the project lies cannot reach the wheel)."""
    base = tmp_path_factory.mktemp("wheel-b")
    rebuild, cwd = base / "deeper" / "nested" / "rebuild", base / "cwd"
    cwd.mkdir()
    proc = run_hermetic(
        "verify", str(tilec_wheel["wheel"]), "--cache", str(wheel_cache), "--rebuild-dir", str(rebuild), "--keep",
        "--json", "--jobs", os.environ.get("HERMETIC_TEST_JOBS", "2"), "--offline", "auto", cwd=cwd, umask=0o077,
        check=False,
    )
    assert proc.returncode in (0, 8), (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    rec = json.loads((rebuild / "dist" / "wheel-record.json").read_text())
    return {"rc": proc.returncode, "report": json.loads(proc.stdout), "record": rec, "wheel": rebuild / "dist" / rec["wheel"],
            "work": rebuild / "work", "stderr": proc.stderr}
