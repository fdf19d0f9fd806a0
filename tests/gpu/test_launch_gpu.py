"""The native launch path (tilec._launch) and the in-process assemblers on a real device, checked
against torch (skipped without a device; torch is needed here)."""

from __future__ import annotations

import dataclasses
import threading
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

N = 4099  # not a multiple of the block: the bounds check matters


@pytest.fixture
def torch(gpu_tilec: ModuleType) -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.fail("a CUDA device is present but torch cannot use it", pytrace=False)
    torch.cuda.init()
    return torch


def _vadd(tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, **kw: Any) -> Any:
    return tilec.compile(kernels.vector_add(tilec.ir), target=sm_target, settings=settings, **kw)


def _inputs(torch: Any) -> tuple[Any, Any, Any]:
    a = torch.randn(N, device="cuda")
    b = torch.randn(N, device="cuda")
    return a, b, torch.full((N,), float("nan"), device="cuda")


def test_native_and_python_launch_agree_with_torch(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, torch: Any
) -> None:
    native = _vadd(gpu_tilec, kernels, sm_target, settings)
    python = _vadd(gpu_tilec, kernels, sm_target, dataclasses.replace(settings, native_launch=False))
    assert native.native_launcher() is not None and python.native_launcher() is None
    grid = (N + 255) // 256
    for k in (native, python):
        a, b, out = _inputs(torch)
        k[grid, 256](a, b, out, N)
        torch.cuda.synchronize()
        assert torch.equal(out, a + b)
        # Raw pointers, and the launch API with explicit dims, on a stream.
        a, b, out = _inputs(torch)
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()
        k.launch((grid, 1, 1), (256, 1, 1), (a.data_ptr(), b.data_ptr(), out.data_ptr(), N), stream=stream)
        stream.synchronize()
        assert torch.equal(out, a + b)


def test_torch_tensors_are_read_through_the_dlpack_table(gpu_tilec: ModuleType, torch: Any) -> None:
    """torch >= 2.10 offers DLPack's C exchange table; the launcher then reads each tensor with
    one C call (the results above come through it)."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip(f"torch {torch.__version__} has no DLPack C exchange table")
    assert gpu_tilec._launch.uses_dlpack_table(torch.Tensor)
    assert gpu_tilec._launch.uses_dlpack_table(torch.nn.Parameter)


def test_host_tensor_is_refused_before_the_gpu(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, torch: Any
) -> None:
    """The issue's case: a CPU tensor used to give torch's TypeError; now it is named."""
    k = _vadd(gpu_tilec, kernels, sm_target, settings)
    a, b, out = _inputs(torch)
    with pytest.raises(gpu_tilec.LaunchArgumentError, match=r"argument 1 'b' .*cpu memory"):
        k[(N + 255) // 256, 256](a, b.cpu(), out, N)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # nothing ran


def test_tensor_on_another_device_is_refused(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, torch: Any
) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    k = _vadd(gpu_tilec, kernels, sm_target, settings)
    a, b, out = _inputs(torch)
    k[1, 256](a, b, out, 256)  # binds the kernel on the current device (0)
    with pytest.raises(gpu_tilec.LaunchArgumentError, match=r"argument 2 'out' .*on cuda:1 but"):
        k[1, 256](a, b, out.to("cuda:1"), 256)


def test_launches_from_threads(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, torch: Any
) -> None:
    """The launcher releases the GIL around cuLaunchKernel; threads sharing it get their own
    arguments through."""
    k = _vadd(gpu_tilec, kernels, sm_target, settings)
    launch = k[(N + 255) // 256, 256]
    work = [_inputs(torch) for _ in range(8)]
    torch.cuda.synchronize()
    errors: list[BaseException] = []

    def run(a: Any, b: Any, out: Any) -> None:
        try:
            for _ in range(50):
                launch(a, b, out, N)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=w) for w in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert not errors
    for a, b, out in work:
        assert torch.equal(out, a + b)


def test_cache_hit_through_a_shortcut_launches(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, torch: Any
) -> None:
    first = _vadd(gpu_tilec, kernels, sm_target, settings, source_key="vadd-gpu")
    hit = _vadd(gpu_tilec, kernels, sm_target, settings, source_key="vadd-gpu")
    assert (first.cache_status, hit.cache_status) == ("miss", "hit")
    a, b, out = _inputs(torch)
    hit[(N + 255) // 256, 256](a, b, out, N)
    torch.cuda.synchronize()
    assert torch.equal(out, a + b)
    # The hit's metadata, made after the launch from the shortcut's copy, is the compile's.
    assert hit._metadata is None and hit.metadata == first.metadata


def test_a_hit_without_ptxas_takes_its_registers_from_the_loaded_function(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, torch: Any
) -> None:
    """No ptxas: the driver assembles the PTX and the registers come from the function. A hit
    through a shortcut loads it before its metadata is made; they are filled in then."""
    first = _vadd(gpu_tilec, kernels, sm_target, settings, source_key="vadd-jit", use_ptxas=False)
    hit = _vadd(gpu_tilec, kernels, sm_target, settings, source_key="vadd-jit", use_ptxas=False)
    assert (first.cache_status, hit.cache_status) == ("miss", "hit") and "cubin" not in hit.asm
    a, b, out = _inputs(torch)
    hit[(N + 255) // 256, 256](a, b, out, N)
    torch.cuda.synchronize()
    assert torch.equal(out, a + b) and hit._metadata is None
    assert hit.metadata.registers is not None and hit.metadata.registers > 0


@pytest.mark.parametrize("assembler", ["nvjitlink", "nvptxcompiler"])
def test_in_process_assemblers_give_ptxas_s_results(
    gpu_tilec: ModuleType, kernels: ModuleType, sm_target: str, settings: Any, torch: Any, assembler: str
) -> None:
    """The same outputs, bit for bit, from cubins made in process as from ptxas's: nvJitLink's
    (`ptxas -c`'s code) and nvPTXCompiler's (ptxas's code: the native tier compares sections)."""
    try:
        k = gpu_tilec.compile(kernels.SIN_IR, target=sm_target, settings=settings, assembler=assembler)
    except gpu_tilec.ToolNotFoundError as exc:
        if assembler == "nvptxcompiler":
            pytest.fail(f"the gpu tier needs the PTX compiler library (a CUDA toolkit's or nvidia-nvptxcompiler): {exc}")
        pytest.skip(f"no nvJitLink here: {exc}")
    ref = gpu_tilec.compile(kernels.SIN_IR, target=sm_target, settings=settings, assembler="ptxas")
    assert k.key != ref.key and k.metadata.assembler == assembler and ref.metadata.assembler == "ptxas"
    assert k.asm["cubin"][:4] == b"\x7fELF"
    assert k.metadata.nvjitlink_version if assembler == "nvjitlink" else k.metadata.nvptxcompiler_version
    n = 1 << 16
    x = (torch.rand(n, device="cuda") - 0.5) * 2e4  # sinf's slow path too (large arguments)
    outs = []
    for kern in (ref, k):
        y = torch.full((n,), float("nan"), device="cuda")
        kern[(n + 255) // 256, 256](x, y, 0.5, n)
        outs.append(y)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[0], torch.sin(x.double()).float() * 0.5, rtol=1e-5, atol=1e-6)
