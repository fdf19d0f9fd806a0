"""The native launch path reads tensors through DLPack's C exchange table (torch >= 2.10 offers
one): one C call per tensor gives its address and device, with no Python method called. The
producer here is aot/fake_dlpack.c, which counts what it is asked; the answers must equal the
Python packer's, and whatever the table cannot settle goes the old ways."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

KDL_CPU, KDL_CUDA, KDL_CUDA_MANAGED = 1, 2, 13


@pytest.fixture
def sig(tilec: ModuleType) -> Any:
    return tilec.launch.Signature.from_llvm("k", ["ptr addrspace(1)", "ptr", "i32"], ["x", "y", "n"])


@pytest.fixture
def launcher(tilec: ModuleType, sig: Any) -> Any:
    def resolver() -> None:
        raise AssertionError("the driver was reached")

    found = tilec.backends.cuda.launch.native_launcher(sig, resolver)
    assert found is not None, "tilec._launch was not built"
    return found


def _python(tilec: ModuleType, sig: Any, args: tuple[Any, ...], device: int | None) -> bytes:
    return bytes(tilec.backends.cuda.launch.pack_bytes(sig, args, device))


def _asked(fake_dlpack: ModuleType, fn: Any) -> tuple[Any, tuple[int, int, int]]:
    """fn's result, and how often the table, data_ptr() and `device` were asked meanwhile."""
    before = fake_dlpack.counts()
    result = fn()
    after = fake_dlpack.counts()
    return result, tuple(a - b for a, b in zip(after, before, strict=True))


def test_cuda_arrays_are_packed_by_the_table_alone(tilec: ModuleType, sig: Any, launcher: Any, fake_dlpack: ModuleType) -> None:
    args = (fake_dlpack.Array(0x7F0000001000, KDL_CUDA, 0), fake_dlpack.Array(0x2000, KDL_CUDA, 0, byte_offset=0x40), 9)
    packed, asked = _asked(fake_dlpack, lambda: launcher.pack(args, 0))
    assert asked == (2, 0, 0)  # one table call per tensor; no data_ptr(), no `device`
    assert packed == _python(tilec, sig, args, 0)  # the address includes byte_offset
    assert packed[:16] == (0x7F0000001000).to_bytes(8, "little") + (0x2040).to_bytes(8, "little")
    assert launcher.check(args, 0) == -1


def test_which_types_are_read_through_a_table(tilec: ModuleType, fake_dlpack: ModuleType) -> None:
    uses = tilec._launch.uses_dlpack_table
    assert uses(fake_dlpack.Array) and uses(fake_dlpack.Future)
    assert not uses(fake_dlpack.Unknown) and not uses(int) and not uses(object)
    with pytest.raises(TypeError, match="takes a type"):
        uses(fake_dlpack.Array(0, KDL_CUDA, 0))


def test_a_newer_table_is_followed_to_version_1(launcher: Any, fake_dlpack: ModuleType) -> None:
    args = (fake_dlpack.Future(0x1000, KDL_CUDA, 0), None, 1)
    assert _asked(fake_dlpack, lambda: launcher.check(args, 0)) == (-1, (1, 0, 0))


def test_a_table_of_an_unknown_version_is_not_used(tilec: ModuleType, sig: Any, launcher: Any, fake_dlpack: ModuleType) -> None:
    args = (fake_dlpack.Unknown(0x1000, KDL_CUDA, 0), None, 1)
    packed, asked = _asked(fake_dlpack, lambda: launcher.pack(args, 0))
    assert asked == (0, 1, 1)  # the data_ptr() way
    assert packed == _python(tilec, sig, args, 0)


def test_a_producer_error_falls_back_to_data_ptr(tilec: ModuleType, sig: Any, launcher: Any, fake_dlpack: ModuleType) -> None:
    args = (fake_dlpack.Array(0x1000, KDL_CUDA, 0, fail=True), None, 1)
    packed, asked = _asked(fake_dlpack, lambda: launcher.pack(args, 0))
    assert asked == (1, 1, 1)
    assert packed == _python(tilec, sig, args, 0)
    assert launcher.check(args, 0) == -1  # and the producer's error was not left set


@pytest.mark.parametrize(
    ("device_type", "device_id", "current", "match"),
    [
        (KDL_CPU, 0, 0, r"argument 1 'y' .*a tensor in cpu memory; a kernel needs device memory"),
        (KDL_CUDA, 1, 0, r"argument 1 'y' .*on cuda:1 but the kernel launches on the current device, cuda:0"),
        (KDL_CUDA_MANAGED, 0, 0, r"argument 1 'y' .*a tensor in dlpack13 memory"),
    ],
)
def test_refused_as_the_python_packer_refuses(
    tilec: ModuleType, sig: Any, launcher: Any, fake_dlpack: ModuleType, device_type: int, device_id: int, current: int, match: str
) -> None:
    args = (None, fake_dlpack.Array(0x1000, device_type, device_id), 1)
    assert launcher.check(args, current) == 1
    with pytest.raises(tilec.LaunchArgumentError, match=match) as native_err:
        launcher.pack(args, current)
    with pytest.raises(tilec.LaunchArgumentError) as python_err:
        _python(tilec, sig, args, current)
    assert str(native_err.value) == str(python_err.value)


def test_another_device_is_packed_when_it_is_current_or_unknown(tilec: ModuleType, sig: Any, launcher: Any, fake_dlpack: ModuleType) -> None:
    args = (fake_dlpack.Array(0x1000, KDL_CUDA, 1), None, 1)
    assert launcher.pack(args, 1) == _python(tilec, sig, args, 1)
    assert launcher.pack(args) == _python(tilec, sig, args, None)  # first launch: device not known yet


def test_table_path_keeps_reference_counts(launcher: Any, fake_dlpack: ModuleType) -> None:
    good = fake_dlpack.Array(0x1000, KDL_CUDA, 0)
    failing = fake_dlpack.Array(0x2000, KDL_CUDA, 0, fail=True)
    host = fake_dlpack.Array(0x3000, KDL_CPU, 0)
    watched = (good, failing, host, type(good))
    launcher.check((good, host, 1), 0)  # the launcher keeps one reference to each type it has seen
    before = [sys.getrefcount(x) for x in watched]
    for _ in range(2000):
        launcher.pack((good, failing, 1), 0)
        launcher.check((good, host, 1), 0)
    assert [sys.getrefcount(x) for x in watched] == before
