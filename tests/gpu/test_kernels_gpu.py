"""Run real kernels on a CUDA device and compare with NumPy (skipped without a device)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


class DeviceBuffer:
    """A cuMemAlloc'd buffer exposing __cuda_array_interface__; freed on close()."""

    def __init__(self, tilec: ModuleType, host: np.ndarray) -> None:
        from cuda.bindings import driver

        self._drv = tilec.backends.cuda.driver
        self._cu = driver
        self.host_dtype = host.dtype
        self.shape = host.shape
        self.nbytes = host.nbytes
        self._drv.current_context()
        self.ptr = self._drv.check("cuMemAlloc", driver.cuMemAlloc(max(1, host.nbytes)))
        self.upload(host)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.host_dtype.str,
            "data": (int(self.ptr), False),
            "version": 3,
        }

    def upload(self, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host, dtype=self.host_dtype)
        self._drv.check(
            "cuMemcpyHtoD", self._cu.cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes)
        )

    def download(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.host_dtype)
        self._drv.check("cuCtxSynchronize", self._cu.cuCtxSynchronize())
        self._drv.check(
            "cuMemcpyDtoH", self._cu.cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes)
        )
        return out

    def close(self) -> None:
        self._drv.check("cuMemFree", self._cu.cuMemFree(self.ptr))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()  # fresh inputs every run


@pytest.fixture
def buffers(gpu_tilec: ModuleType) -> Any:
    made: list[DeviceBuffer] = []

    def make(host: np.ndarray) -> DeviceBuffer:
        buf = DeviceBuffer(gpu_tilec, host)
        made.append(buf)
        return buf

    yield make
    for b in made:
        b.close()


def poisoned(n: int) -> np.ndarray:
    return np.full(n, np.nan, dtype=np.float32)


@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_vector_add(
    gpu_tilec: ModuleType,
    kernels: ModuleType,
    sm_target: str,
    settings: Any,
    buffers: Any,
    rng: np.random.Generator,
    n: int,
) -> None:
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    da, db, dout = buffers(a), buffers(b), buffers(poisoned(n + 64))
    with gpu_tilec.compile(
        kernels.vector_add(gpu_tilec.ir), target=sm_target, settings=settings
    ) as k:
        k[(n + 255) // 256, 256](da, db, dout, n)
        out = dout.download()
    np.testing.assert_array_equal(out[:n], a + b)
    assert np.isnan(out[n:]).all(), "kernel wrote past n"


@pytest.mark.parametrize("n", [256, 1000, 65536 + 17])
def test_block_reduction_shared_memory(
    gpu_tilec: ModuleType,
    kernels: ModuleType,
    sm_target: str,
    settings: Any,
    buffers: Any,
    rng: np.random.Generator,
    n: int,
) -> None:
    block = kernels.BLOCK
    blocks = (n + block - 1) // block
    x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
    dx, dout = buffers(x), buffers(poisoned(blocks))
    k = gpu_tilec.compile(kernels.block_sum(gpu_tilec.ir), target=sm_target, settings=settings)
    try:
        assert k.metadata.shared_bytes == 4 * block
        k[blocks, block](dx, dout, n)
        out = dout.download()
    finally:
        k.close()
    assert not np.isnan(out).any(), "some block did not write its sum"
    padded = np.zeros(blocks * block, dtype=np.float64)
    padded[:n] = x
    expected = padded.reshape(blocks, block).sum(axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("ftz", [False, True])
def test_libdevice_expf(
    gpu_tilec: ModuleType,
    kernels: ModuleType,
    sm_target: str,
    settings: Any,
    buffers: Any,
    rng: np.random.Generator,
    ftz: bool,
) -> None:
    n = 100_003
    x = rng.uniform(-20.0, 20.0, n).astype(np.float32)
    scale = float(rng.uniform(0.5, 2.0))
    dx, dy = buffers(x), buffers(poisoned(n))
    with gpu_tilec.compile(kernels.EXP_IR, target=sm_target, ftz=ftz, settings=settings) as k:
        assert k.metadata.libdevice_linked == ("__nv_expf",)
        k[(n + 127) // 128, 128](dx, dy, scale, n)
        y = dy.download()
    assert not np.isnan(y).any()
    expected = np.exp(x.astype(np.float64)) * np.float32(scale)
    np.testing.assert_allclose(y, expected, rtol=2e-6 * 8, atol=0)


def test_driver_jit_fallback_and_cache_reload(
    gpu_tilec: ModuleType,
    kernels: ModuleType,
    sm_target: str,
    settings: Any,
    buffers: Any,
    rng: np.random.Generator,
) -> None:
    n = 4096
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    da, db, dout = buffers(a), buffers(b), buffers(poisoned(n))
    src = kernels.vector_add(gpu_tilec.ir)
    with gpu_tilec.compile(src, target=sm_target, use_ptxas=False, settings=settings) as k:
        assert "cubin" not in k.asm
        k[n // 128, 128](da, db, dout, n, stream=0)
        np.testing.assert_array_equal(dout.download(), a + b)
        assert k.metadata.registers is not None and k.metadata.registers > 0
    dout.upload(poisoned(n))
    again = gpu_tilec.compile(src, target=sm_target, use_ptxas=False, settings=settings)
    assert again.cache_status == "hit"
    with again:
        again[n // 128, 128](da, db, dout, n)
        again[n // 128, 128](da, db, dout, n)  # second launch reuses the loaded function
        assert len(again._loaded) == 1
        np.testing.assert_array_equal(dout.download(), a + b)


def test_wrong_args_never_reach_the_gpu(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, buffers: Any
) -> None:
    dout = buffers(poisoned(8))
    with gpu_tilec.compile(
        kernels.vector_add(gpu_tilec.ir), target=sm_target, settings=settings
    ) as k:
        with pytest.raises(TypeError):
            k[1, 8](dout, dout, dout, 8.0)
        assert k._loaded == {}  # nothing was loaded, nothing launched
    assert np.isnan(dout.download()).all()


def test_cuda_error_is_readable(gpu_tilec: ModuleType) -> None:
    from cuda.bindings import driver

    drv = gpu_tilec.backends.cuda.driver
    drv.current_context()
    with pytest.raises(gpu_tilec.CudaError, match=r"cuMemFree failed: CUDA_ERROR_\w+ \(\d+\): ") as info:
        drv.check("cuMemFree", driver.cuMemFree(driver.CUdeviceptr(0x10)))
    err = info.value
    assert err.call == "cuMemFree" and err.code != 0
    # The name is the driver's own for that code, not a guess.
    name_rc, name = driver.cuGetErrorName(driver.CUresult(err.code))
    assert name_rc == driver.CUresult.CUDA_SUCCESS and err.name == name.decode()
    # A bad free is reported, not sticky: the context still works afterwards.
    drv.synchronize()


def test_torch_tensors_and_stream(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any
) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    n = 12345
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    stream = torch.cuda.Stream()
    with gpu_tilec.compile(
        kernels.vector_add(gpu_tilec.ir), target=sm_target, settings=settings
    ) as k:
        with torch.cuda.stream(stream):
            k[(n + 127) // 128, 128](a, b, out, n, stream=stream)
        stream.synchronize()
    assert torch.equal(out, a + b)


# bench/tilec_kernels.py's 8-wide adds: vadd_vec's options for each
VADD_V8 = {"vadd_v8": {}, "vadd_v8_m4": {"whole_vectors": True}, "vadd_v8_flat": {"one_path": True}}


@pytest.mark.parametrize(
    ("name", "n"),
    [("vadd_v8", 2048 * 3 + 1), ("vadd_v8", 2048 * 3 + 1003),
     ("vadd_v8_m4", 2048 * 3 + 4 * 37), ("vadd_v8_m4", 2048 * 3 + 2044),
     ("vadd_v8_flat", 2048 * 3 + 4 * 37), ("vadd_v8_flat", 2048 * 3 + 2044)],
)
def test_the_bench_s_8_wide_vector_adds_with_a_partial_last_block(
    gpu_tilec: ModuleType, sm_target: str, settings: Any, buffers: Any, rng: np.random.Generator,
    name: str, n: int,
) -> None:
    """bench/tilec_kernels.py's vadd_v8, vadd_v8_m4 and vadd_v8_flat (n a multiple of 4 for both), timed against
    Triton, on sizes whose last block takes the tail (the bench's own size fills every block): every element,
    nothing past n."""
    from bench import tilec_kernels

    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    da, db, dout = buffers(a), buffers(b), buffers(poisoned(n + 2048))
    with gpu_tilec.compile(tilec_kernels.vadd_vec(gpu_tilec.ir, 2, **VADD_V8[name]), target=sm_target,
                           settings=settings) as k:
        k[(n + 2047) // 2048, 256](da, db, dout, n)
        out = dout.download()
    np.testing.assert_array_equal(out[:n], a + b)
    assert np.isnan(out[n:]).all(), "kernel wrote past n"
