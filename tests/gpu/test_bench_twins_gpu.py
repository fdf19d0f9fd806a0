"""The cold pairs' Triton twins made without a device are the compiles Triton's JIT makes on one.

`bench/tilec_cold_pairs.py --no-gpu` writes down the JIT's specialization for the bench's sizes instead of
asking the JIT for it; if Triton specialized differently (another divisibility, another option), the
device-free ratios would time another compile. Needs torch and Triton beside the device (the GPU runner).
"""

from __future__ import annotations

from types import ModuleType

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["vadd", "expsin"])
def test_device_free_twins_compile_as_the_jit_does(gpu_tilec: ModuleType, name: str) -> None:
    torch = pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    from bench.tilec_cold_pairs import device_free_twins
    from bench.tilec_compile import triton_specialization

    major, minor = torch.cuda.get_device_capability(0)
    src, target, options, _ = triton_specialization(name)
    free_src, free_target, free_options = device_free_twins(f"sm_{major}{minor}")[name]
    jit = triton.compile(src, target=target, options=options)
    free = triton.compile(free_src, target=free_target, options=free_options)
    assert free.hash == jit.hash
    assert free.asm["ptx"] == jit.asm["ptx"]
