from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

NATIVE = Path(__file__).resolve().parents[1] / "native"


def _load(name: str) -> ModuleType:
    key = f"_tilec_tests_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, NATIVE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod


CUDA_ERROR_NO_DEVICE = 100


def _device_count() -> tuple[int, str]:
    """CUDA devices, asked of libcuda itself, so that a missing cuda-bindings cannot pass
    for a missing GPU; (0, why) when there is none."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return 0, f"no CUDA driver ({exc})"
    rc = libcuda.cuInit(0)
    if rc == CUDA_ERROR_NO_DEVICE:
        return 0, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"
    if rc != 0:
        pytest.fail(f"libcuda is present but cuInit(0) failed with CUresult {rc}", pytrace=False)
    count = ctypes.c_int(0)
    rc = libcuda.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        pytest.fail(f"cuDeviceGetCount failed with CUresult {rc}", pytrace=False)
    return count.value, "no CUDA device (cuDeviceGetCount: 0)"


def _cuda_device_or_skip() -> None:
    """Skip without a device; with one, everything the tier needs must be there."""
    count, why = _device_count()
    if count == 0:
        pytest.skip(why)
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError as exc:
        pytest.fail(
            f"{count} CUDA device(s) present but cuda-bindings cannot be imported ({exc}); "
            "the gpu tier must run here: pip install 'tilec[cuda]'",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def gpu_tilec(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ModuleType:
    _cuda_device_or_skip()
    return _load("tilec_build").import_tilec(request.config, tmp_path_factory.mktemp("tilec-stage"))


@pytest.fixture(scope="session")
def kernels() -> ModuleType:
    return _load("kernels")


@pytest.fixture(scope="session")
def sm_target(gpu_tilec: ModuleType) -> str:
    """sm_XX of device 0, capped to what this LLVM knows (PTX JITs forward)."""
    from cuda.bindings import driver

    drv = gpu_tilec.backends.cuda.driver
    drv.init()
    dev = drv.check("cuDeviceGet", driver.cuDeviceGet(0))
    attr = driver.CUdevice_attribute
    major = drv.check(
        "cuDeviceGetAttribute",
        driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
    )
    minor = drv.check(
        "cuDeviceGetAttribute",
        driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
    )
    known = [p for p in gpu_tilec.native.target_info().processors if p[3:].isdigit()]
    want = major * 10 + minor
    fits = [p for p in known if int(p[3:]) <= want]
    return max(fits, key=lambda p: int(p[3:]))


@pytest.fixture
def settings(gpu_tilec: ModuleType, tmp_path: Path) -> object:
    import os

    env = dict(os.environ)
    env["TILEC_CACHE_DIR"] = str(tmp_path / "cache")
    return gpu_tilec.Settings.from_env(env)
