"""Argument checking happens before anything reaches the GPU (no device needed)."""

from __future__ import annotations

import ctypes
import struct
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native


class FakeArray:
    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (4,),
            "typestr": "<f4",
            "data": (ptr, False),
            "version": 3,
        }


@pytest.fixture
def exp_kernel(tilec: ModuleType, kernels: ModuleType, settings: Any, monkeypatch: Any) -> Any:
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)

    def no_driver() -> None:
        raise AssertionError("the driver was reached")

    # Any driver use would fail the test: checks must come first.
    monkeypatch.setattr(tilec.backends.cuda.driver, "cuda", no_driver)
    monkeypatch.setattr(tilec.backends.cuda.driver, "current_context", no_driver)
    return k


def test_signature_from_llvm(exp_kernel: Any) -> None:
    assert str(exp_kernel.signature) == (
        "exp_scale(ptr addrspace(1), ptr addrspace(1), float, i64)"
    )


def test_wrong_count_raises_before_launch(tilec: ModuleType, exp_kernel: Any) -> None:
    with pytest.raises(TypeError, match="takes 4 argument"):
        exp_kernel[1, 32](FakeArray(0x1000), FakeArray(0x2000), 1.0)
    with pytest.raises(tilec.LaunchArgumentError):
        exp_kernel[1, 32](FakeArray(0x1000), FakeArray(0x2000), 1.0, 4, 5)


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (("x", 0x2000, 1.0, 4), TypeError, "argument 0 .*got str"),
        ((1.5, 0x2000, 1.0, 4), TypeError, "argument 0 .*got float"),
        ((0x1000, 0x2000, "1", 4), TypeError, "argument 2 .*got str"),
        ((0x1000, 0x2000, 1.0, 4.0), TypeError, "argument 3 .*integer"),
        ((0x1000, 0x2000, 1.0, True), TypeError, "argument 3"),
        ((0x1000, 0x2000, 1.0, 2**64), ValueError, "does not fit i64"),
        ((0x1000, 0x2000, 1e39, 4), ValueError, "overflows float32"),
        ((-1, 0x2000, 1.0, 4), ValueError, "outside 0..2\\*\\*64-1"),
    ],
)
def test_bad_argument_raises_before_launch(
    exp_kernel: Any, args: tuple[Any, ...], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        exp_kernel[1, 32](*args)


@pytest.mark.parametrize(
    ("grid", "block", "match"),
    [
        (0, 32, "grid\\[0\\] = 0"),
        (1, 2048, "block\\[0\\] = 2048"),
        (1, (32, 32, 2), "2048 threads"),
        ((1, 1, 1, 1), 32, "1 to 3 ints"),
        (1.0, 32, "int or a tuple"),
    ],
)
def test_bad_launch_config(exp_kernel: Any, grid: Any, block: Any, match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        exp_kernel[grid, block]


def test_packing_layout(tilec: ModuleType) -> None:
    sig = tilec.launch.Signature.from_llvm(
        "k", ["ptr addrspace(1)", "ptr", "i32", "float", "double", "i64"]
    )
    packed = tilec.backends.cuda.launch.pack_args(sig, [FakeArray(0xDEAD0000), None, -1, 1.5, 2.25, 2**63])
    assert len(packed.array) == 6

    def read(i: int, n: int) -> bytes:
        return ctypes.string_at(packed.array[i], n)

    assert struct.unpack("<Q", read(0, 8))[0] == 0xDEAD0000
    assert struct.unpack("<Q", read(1, 8))[0] == 0
    assert read(2, 4) == b"\xff\xff\xff\xff"
    assert struct.unpack("<f", read(3, 4))[0] == 1.5
    assert struct.unpack("<d", read(4, 8))[0] == 2.25
    assert struct.unpack("<Q", read(5, 8))[0] == 2**63


def test_unsupported_parameter_type(tilec: ModuleType) -> None:
    with pytest.raises(tilec.LaunchArgumentError, match="<4 x float>"):
        tilec.launch.Signature.from_llvm("k", ["<4 x float>"])
