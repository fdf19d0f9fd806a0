"""The CUDA driver through cuda.bindings.driver, imported lazily.

Compiling needs no driver; only loading and launching come here. Every call's
CUresult is checked and turned into a CudaError naming the call.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from types import ModuleType
from typing import Any

from ...errors import CudaError, CudaUnavailableError

_lock = threading.Lock()
_primary: dict[int, Any] = {}  # device ordinal -> retained primary context


@functools.cache
def cuda() -> ModuleType:
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise CudaUnavailableError(
            "launching kernels needs cuda-bindings: pip install 'tilec[cuda]' "
            f"(import failed: {exc})"
        ) from exc
    mod: ModuleType = driver
    return mod


def check(call: str, result: Any) -> Any:
    """Unpack `(CUresult, *values)`; raise CudaError unless CUDA_SUCCESS."""
    drv = cuda()
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != drv.CUresult.CUDA_SUCCESS:
        code = int(err)
        name_err, name = drv.cuGetErrorName(err)
        desc_err, desc = drv.cuGetErrorString(err)
        raise CudaError(
            call,
            code,
            name.decode() if name_err == drv.CUresult.CUDA_SUCCESS and name else "CUDA_ERROR",
            desc.decode() if desc_err == drv.CUresult.CUDA_SUCCESS and desc else "unknown error",
        )
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


@functools.cache
def init() -> None:
    drv = cuda()
    try:
        result = drv.cuInit(0)
    except Exception as exc:  # cuda-bindings raises when libcuda.so is absent
        raise CudaUnavailableError(f"no CUDA driver: {exc}") from exc
    check("cuInit", result)


def current_context(device: int = 0) -> Any:
    """The current context; if there is none, the device's primary context (retained once)."""
    init()
    drv = cuda()
    ctx = check("cuCtxGetCurrent", drv.cuCtxGetCurrent())
    if ctx is not None and int(ctx) != 0:
        return ctx
    with _lock:
        ctx = _primary.get(device)
        if ctx is None:
            dev = check("cuDeviceGet", drv.cuDeviceGet(device))
            ctx = check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(dev))
            _primary[device] = ctx
    check("cuCtxSetCurrent", drv.cuCtxSetCurrent(ctx))
    return ctx


def current_device() -> int:
    """The ordinal of the current context's device (a context must be current)."""
    return int(check("cuCtxGetDevice", cuda().cuCtxGetDevice()))


def load_module(image: bytes, is_ptx: bool) -> Any:
    """cuModuleLoadData on a cubin, or on PTX (the driver JIT) when no ptxas was found."""
    drv = cuda()
    data = image + b"\0" if is_ptx and not image.endswith(b"\0") else image
    buf = ctypes.create_string_buffer(data, len(data))
    return check("cuModuleLoadData", drv.cuModuleLoadData(ctypes.addressof(buf)))


def driver_version() -> int:
    """The CUDA version the installed driver supports, as cuDriverGetVersion gives it (13000)."""
    return int(check("cuDriverGetVersion", cuda().cuDriverGetVersion()))


def too_new(release: str | None, version: int) -> str | None:
    """Why a cubin made by CUDA `release` ("13.0.88") cannot load with a driver of `version`
    (12040), or None where it can: cubins run on drivers of their major release or newer."""
    if not release or not release.split(".")[0].isdigit():
        return None
    major = int(release.split(".")[0])
    if version // 1000 >= major:
        return None
    return (
        f"the cubin was assembled by CUDA {release}, which needs a driver for CUDA {major}.0 or "
        f"newer, and this driver supports CUDA {version // 1000}.{version % 1000 // 10}"
    )


def get_function(module: Any, name: str) -> Any:
    return check("cuModuleGetFunction", cuda().cuModuleGetFunction(module, name.encode()))


def unload_module(module: Any) -> None:
    check("cuModuleUnload", cuda().cuModuleUnload(module))


def function_attribute(function: Any, attribute: str) -> int:
    drv = cuda()
    attr = getattr(drv.CUfunction_attribute, attribute)
    return int(check("cuFuncGetAttribute", drv.cuFuncGetAttribute(attr, function)))


def set_max_dynamic_shared(function: Any, nbytes: int) -> None:
    drv = cuda()
    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    check("cuFuncSetAttribute", drv.cuFuncSetAttribute(function, attr, nbytes))


def as_stream(stream: Any) -> Any:
    """None (the legacy default stream), an int handle, a CUstream, or e.g. torch.cuda.Stream."""
    drv = cuda()
    if stream is None:
        return drv.CUstream(0)
    if isinstance(stream, drv.CUstream):
        return stream
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(
            f"stream must be None, an int handle, a CUstream or have .cuda_stream, got {stream!r}"
        )
    return drv.CUstream(handle)


def launch(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_mem: int,
    stream: Any,
    params_address: int,
) -> None:
    drv = cuda()
    check(
        "cuLaunchKernel",
        drv.cuLaunchKernel(function, *grid, *block, shared_mem, stream, params_address, 0),
    )


def synchronize() -> None:
    check("cuCtxSynchronize", cuda().cuCtxSynchronize())
