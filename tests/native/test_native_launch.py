"""The native launch path (tilec._launch) without a GPU: its packing equals the Python packer's
byte for byte, it refuses what the Python packer refuses (with the same LaunchArgumentError),
and nothing reaches the driver before the arguments are checked."""

from __future__ import annotations

import enum
import subprocess
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.native

TYPES = ["ptr addrspace(1)", "ptr", "i8", "i16", "i32", "i64", "float", "double"]


class FakeDevice:
    """torch.device's shape: .type and .index."""

    def __init__(self, kind: str, index: int | None) -> None:
        self.type = kind
        self.index = index


class FakeTensor:
    """A torch.Tensor stand-in: data_ptr(), device, and torch's __index__ (which is what a
    host tensor used to reach, giving "only integer tensors of a single element...")."""

    def __init__(self, ptr: int, device: Any = None) -> None:
        self._ptr = ptr
        self.device = device if device is not None else FakeDevice("cuda", 0)

    def data_ptr(self) -> int:
        return self._ptr

    def __index__(self) -> int:
        raise TypeError("only integer tensors of a single element can be converted to an index")


class FakeArray:
    def __init__(self, ptr: int, **extra: Any) -> None:
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (ptr, False), "version": 3, **extra}


class CUdeviceptr:
    """cuda-python's pointer type is recognised by name and converted with int()."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value


class Index:
    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


class AsFloat:
    def __float__(self) -> float:
        return 0.3


class Color(enum.IntEnum):
    RED = 7


class Mapping:
    """A __cuda_array_interface__ that is a mapping but no dict: only the Python packer reads it."""

    def __init__(self, ptr: int) -> None:
        self._d = {"data": (ptr, False)}

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._d.get(key, default)


@pytest.fixture
def sig(tilec: ModuleType) -> Any:
    return tilec.launch.Signature.from_llvm("k", TYPES, ["a", "b", "c", "d", "e", "f", "g", "h"])


def _native(tilec: ModuleType, sig: Any) -> Any:
    def resolver() -> None:
        raise AssertionError("the driver was reached")

    launcher = tilec.backends.cuda.launch.native_launcher(sig, resolver)
    assert launcher is not None, "tilec._launch was not built"
    return launcher


def _python(tilec: ModuleType, sig: Any, args: tuple[Any, ...], device: int | None = None) -> bytes:
    return bytes(tilec.backends.cuda.launch.pack_bytes(sig, args, device))


GOOD = [
    (0xDEAD0000, None, 0, 0, 0, 0, 0.0, 0.0),
    (FakeTensor(0x7F0000001000), FakeArray(0x2000), -128, -32768, -(2**31), -(2**63), -1.5, -2.25),
    (FakeArray(0x10), 0, 255, 65535, 2**32 - 1, 2**64 - 1, 3.4028234663852886e38, 1e308),
    (CUdeviceptr(0x1234), Index(0x99), Index(-1), -5, 7, Color.RED, float("inf"), float("-inf")),
    (2**64 - 1, Color.RED, 1, 2, Index(3), 4, 1, 2),
    (FakeTensor(0x10, device="cuda:0"), FakeTensor(0x20, device="cuda"), 1, 2, 3, 4, AsFloat(), 0.1),
    (FakeArray(0x30, mask=None), FakeTensor(0x40, device=FakeDevice("cuda", None)), 1, 2, 3, 4, 5, 6),
    (SimpleNamespace(__cuda_array_interface__=Mapping(0x50)), None, 1, 2, 3, 4, 1e-46, 5e-324),
]


@pytest.mark.parametrize("args", GOOD, ids=range(len(GOOD)))
def test_native_packing_equals_python(tilec: ModuleType, sig: Any, args: tuple[Any, ...]) -> None:
    launcher = _native(tilec, sig)
    expected = _python(tilec, sig, args, 0)
    assert len(expected) == 8 + 8 + 1 + 2 + 4 + 8 + 4 + 8
    assert launcher.pack(args, 0) == expected
    assert launcher.pack(args) == _python(tilec, sig, args)


def test_native_packer_handles_common_kinds_itself(tilec: ModuleType, sig: Any) -> None:
    """The fast path is native: only an object it does not know goes to the Python packer."""
    launcher = _native(tilec, sig)
    for args in GOOD[:7]:
        assert launcher.check(args, 0) == -1, args
    assert launcher.check(GOOD[7], 0) == 0  # a non-dict __cuda_array_interface__


def test_packing_values(tilec: ModuleType, sig: Any) -> None:
    import struct

    packed = _native(tilec, sig).pack((FakeTensor(0xAB), None, -1, 513, -2, 2**63, 1.5, 2.25))
    assert packed == struct.pack("<QQbhiQfd", 0xAB, 0, -1, 513, -2, 2**63, 1.5, 2.25)


BAD = [
    # (args, index refused natively, error class name, message)
    (("x", 0, 1, 2, 3, 4, 5, 6), 0, "LaunchArgumentError", r"argument 0 'a' \(ptr addrspace\(1\)\): .*got str"),
    ((1.5, 0, 1, 2, 3, 4, 5, 6), 0, "LaunchArgumentError", r"argument 0 'a' .*got float"),
    ((True, 0, 1, 2, 3, 4, 5, 6), 0, "LaunchArgumentError", r"argument 0 'a' .*got bool"),
    ((-1, 0, 1, 2, 3, 4, 5, 6), 0, "LaunchValueError", r"argument 0 'a' .*outside 0..2\*\*64-1"),
    ((2**64, 0, 1, 2, 3, 4, 5, 6), 0, "LaunchValueError", r"outside 0..2\*\*64-1"),
    ((object(), 0, 1, 2, 3, 4, 5, 6), 0, "LaunchArgumentError", r"argument 0 'a' .*got object"),
    ((FakeArray(8, mask=(1,)), 0, 1, 2, 3, 4, 5, 6), 0, "LaunchValueError", "masked arrays"),
    ((0, 0, 256, 2, 3, 4, 5, 6), 2, "LaunchValueError", r"argument 2 'c' \(i8\): 256 does not fit i8"),
    ((0, 0, -129, 2, 3, 4, 5, 6), 2, "LaunchValueError", "-129 does not fit i8"),
    ((0, 0, 1, 65536, 3, 4, 5, 6), 3, "LaunchValueError", "does not fit i16"),
    ((0, 0, 1, 2, 2**32, 4, 5, 6), 4, "LaunchValueError", "does not fit i32"),
    ((0, 0, 1, 2, 3, 2**64, 5, 6), 5, "LaunchValueError", "does not fit i64"),
    ((0, 0, 1, 2, 3, -(2**63) - 1, 5, 6), 5, "LaunchValueError", "does not fit i64"),
    ((0, 0, 1.0, 2, 3, 4, 5, 6), 2, "LaunchArgumentError", r"argument 2 'c' .*expected an integer"),
    ((0, 0, True, 2, 3, 4, 5, 6), 2, "LaunchArgumentError", "expected an integer"),
    ((0, 0, "1", 2, 3, 4, 5, 6), 2, "LaunchArgumentError", "expected an integer"),
    ((0, 0, 1, 2, 3, 4, "5", 6), 6, "LaunchArgumentError", r"argument 6 'g' \(float\): expected a number"),
    ((0, 0, 1, 2, 3, 4, True, 6), 6, "LaunchArgumentError", "expected a number"),
    ((0, 0, 1, 2, 3, 4, b"5", 6), 6, "LaunchArgumentError", "expected a number"),
    ((0, 0, 1, 2, 3, 4, object(), 6), 6, "LaunchArgumentError", "expected a number"),
    ((0, 0, 1, 2, 3, 4, 1e39, 6), 6, "LaunchValueError", "overflows float32"),
    ((0, 0, 1, 2, 3, 4, 5, None), 7, "LaunchArgumentError", r"argument 7 'h' \(double\): expected a number"),
]


@pytest.mark.parametrize(("args", "index", "exc", "match"), BAD, ids=range(len(BAD)))
def test_native_refuses_what_python_refuses(
    tilec: ModuleType, sig: Any, args: tuple[Any, ...], index: int, exc: str, match: str
) -> None:
    launcher = _native(tilec, sig)
    assert launcher.check(args, 0) == index
    with pytest.raises(getattr(tilec, exc), match=match) as native_err:
        launcher.pack(args, 0)
    with pytest.raises(getattr(tilec, exc)) as python_err:
        _python(tilec, sig, args, 0)
    assert str(native_err.value) == str(python_err.value)


def test_wrong_count(tilec: ModuleType, sig: Any) -> None:
    launcher = _native(tilec, sig)
    for args in [(0,) * 7, (0,) * 9, ()]:
        assert launcher.check(args, 0) >= 0
        with pytest.raises(tilec.LaunchArgumentError, match=r"kernel k\(ptr addrspace\(1\), .*\) takes 8 argument"):
            launcher.pack(args, 0)


@pytest.mark.parametrize(
    ("device", "match"),
    [
        (FakeDevice("cpu", None), r"argument 0 'a' .*a tensor in cpu memory; a kernel needs device memory"),
        ("cpu", "a tensor in cpu memory"),
        (FakeDevice("meta", None), "a tensor in meta memory"),
        (FakeDevice("cuda", 1), r"argument 0 'a' .*on cuda:1 but the kernel launches on the current device, cuda:0"),
        ("cuda:1", "on cuda:1 but"),
    ],
)
def test_host_or_other_device_tensor(tilec: ModuleType, sig: Any, device: Any, match: str) -> None:
    """What the issue reports: a CPU tensor got torch's raw TypeError; now a LaunchArgumentError
    names the parameter, from both packers, before anything reaches the driver."""
    args = (FakeTensor(0x1000, device), 0, 1, 2, 3, 4, 5, 6)
    launcher = _native(tilec, sig)
    assert launcher.check(args, 0) == 0
    with pytest.raises(tilec.LaunchArgumentError, match=match):
        launcher.pack(args, 0)
    with pytest.raises(tilec.LaunchArgumentError, match=match):
        _python(tilec, sig, args, 0)


def test_other_device_is_allowed_when_it_is_current(tilec: ModuleType, sig: Any) -> None:
    args = (FakeTensor(0x1000, FakeDevice("cuda", 1)), 0, 1, 2, 3, 4, 5, 6)
    launcher = _native(tilec, sig)
    assert launcher.pack(args, 1) == _python(tilec, sig, args, 1)
    assert launcher.pack(args) == _python(tilec, sig, args)  # device unknown: index not checked


def test_launch_checks_arguments_before_the_driver(tilec: ModuleType, sig: Any) -> None:
    calls: list[str] = []

    def resolver() -> None:
        calls.append("resolver")
        raise tilec.CudaUnavailableError("no driver in this test")

    launcher = tilec.backends.cuda.launch.native_launcher(sig, resolver)
    bad = (FakeTensor(0x1000, FakeDevice("cpu", None)), 0, 1, 2, 3, 4, 5, 6)
    with pytest.raises(tilec.LaunchArgumentError, match="cpu memory"):
        launcher.launch(bad, 1, 1, 1, 32, 1, 1)
    bound = launcher.config(1, 1, 1, 32, 1, 1)
    with pytest.raises(tilec.LaunchArgumentError, match="takes 8 argument"):
        bound(0, 0)
    assert calls == []
    with pytest.raises(TypeError, match="shared_mem must be a non-negative int, got -1"):
        bound(*GOOD[0], shared_mem=-1)
    with pytest.raises(TypeError, match="stream must be None, an int handle"):
        bound(*GOOD[0], stream="s")
    with pytest.raises(TypeError, match="'grid'"):
        bound(*GOOD[0], grid=1)
    assert calls == []
    # Good arguments go on to the resolver (which loads the module; here it has no driver).
    with pytest.raises(tilec.CudaUnavailableError):
        bound(*GOOD[0], stream=SimpleNamespace(cuda_stream=0), shared_mem=0)
    assert calls == ["resolver"]


def test_kernel_launch_uses_the_native_path(tilec: ModuleType, kernels: ModuleType, settings: Any, monkeypatch: Any) -> None:
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    assert str(k.signature) == "exp_scale(ptr addrspace(1), ptr addrspace(1), float, i64)"
    native = k.native_launcher()
    assert native is not None and native.nparams == 4
    launcher = k[4, 32]
    assert type(launcher).__name__ == "BoundLaunch" and launcher.grid == (4, 1, 1) and launcher.block == (32, 1, 1)
    assert k[4, 32] is launcher  # checked once per configuration
    with pytest.raises(tilec.LaunchValueError):
        k[4, 0]
    with pytest.raises(TypeError, match="int or a tuple"):
        k[4.0, 32]  # hashes like (4, 32), which is remembered: still refused

    def no_driver() -> None:
        raise AssertionError("the driver was reached")

    monkeypatch.setattr(tilec.backends.cuda.driver, "cuda", no_driver)
    monkeypatch.setattr(tilec.backends.cuda.driver, "current_context", no_driver)
    cpu = FakeTensor(0x1000, FakeDevice("cpu", None))
    with pytest.raises(tilec.LaunchArgumentError, match=r"kernel 'exp_scale' argument 1 'y' .*cpu memory"):
        k[4, 32](FakeTensor(0x2000), cpu, 1.0, 4)
    with pytest.raises(tilec.LaunchArgumentError, match="cpu memory"):
        k.launch((4, 1, 1), (32, 1, 1), (FakeTensor(0x2000), cpu, 1.0, 4))
    with pytest.raises(AssertionError, match="the driver was reached"):
        k[4, 32](FakeTensor(0x2000), FakeTensor(0x3000), 1.0, 4)


def test_python_launch_path_refuses_host_tensors(
    tilec: ModuleType, kernels: ModuleType, settings_env: dict[str, str], monkeypatch: Any
) -> None:
    py = tilec.Settings.from_env({**settings_env, "TILEC_NATIVE_LAUNCH": "0"})
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=py)
    assert k.native_launcher() is None
    assert type(k[4, 32]).__name__ == "_Launcher"

    def no_driver() -> None:
        raise AssertionError("the driver was reached")

    monkeypatch.setattr(tilec.backends.cuda.driver, "cuda", no_driver)
    monkeypatch.setattr(tilec.backends.cuda.driver, "current_context", no_driver)
    with pytest.raises(tilec.LaunchArgumentError, match=r"argument 1 'y' .*cpu memory"):
        k[4, 32](FakeTensor(0x2000), FakeTensor(0x1000, "cpu"), 1.0, 4)



def test_launch_module_does_not_link_libcuda(tilec: ModuleType) -> None:
    mod = tilec.backends.cuda.launch.native()
    assert mod is not None
    so = Path(mod.__file__)
    dynamic = subprocess.run(["readelf", "-d", "--wide", str(so)], capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed and not [line for line in needed if "libcuda" in line], needed
    exported = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True).stdout
    assert [line.split()[-1] for line in exported.splitlines()] == ["PyInit__launch"]
    # Importing it loads no driver; the first bind does.
    assert mod.driver_loaded() is False


TORCH_CHILD = """
import json, sys, types

class device:
    def __init__(self, kind, index):
        self.type, self.index = kind, index

class Tensor:
    def __init__(self, ptr, kind="cuda", index=0, claimed=None):
        self._ptr, self._kind, self._index, self._claimed = ptr, kind, index, claimed
    @property
    def is_cuda(self):
        return self._kind == "cuda"
    def get_device(self):
        return self._index if self._kind == "cuda" else -1
    @property
    def device(self):
        if self._claimed is not None:
            return device(self._claimed, None)
        return device(self._kind, self._index if self._kind == "cuda" else None)
    def data_ptr(self):
        return self._ptr

torch = types.ModuleType("torch")
torch.Tensor = Tensor
sys.modules["torch"] = torch  # a stand-in: the launcher recognises torch.Tensor by type
import tilec
from tilec.backends.cuda import launch as L

sig = tilec.launch.Signature.from_llvm("k", ["ptr", "ptr", "i32"], ["a", "b", "n"])
launcher = L.native_launcher(sig, lambda: None)
cases = {
    "cuda": (Tensor(0x10), Tensor(0x20, "cuda", 0), 5),
    "cpu": (Tensor(0x10), Tensor(0x20, "cpu"), 5),
    "other": (Tensor(0x10), Tensor(0x20, "cuda", 1), 5),
    "subclass": (type("Parameter", (Tensor,), {})(0x30), None, 5),
}
out = {}
for name, args in cases.items():
    r = {"check": launcher.check(args, 0)}
    for who, fn in (("native", lambda: launcher.pack(args, 0)), ("python", lambda: L.pack_bytes(sig, args, 0))):
        try:
            r[who] = fn().hex()
        except Exception as exc:
            r[who] = [type(exc).__name__, str(exc)]
    out[name] = r
# A tensor whose is_cuda says CUDA while its device says cpu: only the torch path reads is_cuda.
out["torch_path"] = launcher.check((Tensor(0x10, claimed="cpu"), None, 5), 0)
print("RESULT " + json.dumps(out))
"""


def test_torch_tensors_take_the_is_cuda_path(tilec: ModuleType) -> None:
    """torch.Tensor (recognised by type once torch is imported) is checked with is_cuda and
    get_device() instead of building a torch.device; the answers equal the Python packer's."""
    import json
    import os
    import sys

    env = dict(os.environ, PYTHONPATH=str(Path(tilec.__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, "-c", TORCH_CHILD], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert out["cuda"]["check"] == -1 and out["cuda"]["native"] == out["cuda"]["python"] == "1000000000000000" + "2000000000000000" + "05000000"
    assert out["subclass"]["check"] == -1 and out["subclass"]["native"] == out["subclass"]["python"]
    for refused in ("cpu", "other"):
        assert out[refused]["check"] == 1
        assert out[refused]["native"] == out[refused]["python"] and out[refused]["native"][0] == "LaunchArgumentError"
    assert "cpu memory" in out["cpu"]["native"][1] and "on cuda:1 but" in out["other"]["native"][1]
    assert out["torch_path"] == -1


def test_packing_keeps_reference_counts_and_memory(tilec: ModuleType, sig: Any) -> None:
    """The C++ packer counts references by hand: after many packs, accepted and refused, every
    argument holds the references it held before, and no temporary is left behind."""
    import sys
    import tracemalloc

    launcher = _native(tilec, sig)
    tensor, array, index, big = FakeTensor(0x1000), FakeArray(0x2000), Index(0x30), 2**64 - 1
    good = (tensor, array, index, Index(-2), Index(2**31), big, AsFloat(), 2.5)
    bad = (FakeTensor(0x10, FakeDevice("cpu", None)), None, 1, 2, 3, 4, 5, 6)
    bound = launcher.config(1, 1, 1, 1, 1, 1)
    watched = (tensor, tensor.device, array, array.__cuda_array_interface__, index, big, good, bad)
    before = [sys.getrefcount(x) for x in watched]

    def rounds(n: int) -> None:
        for _ in range(n):
            launcher.pack(good, 0)
            launcher.check(good, 0)
            launcher.check(bad, 0)
            with pytest.raises(tilec.LaunchArgumentError):
                launcher.pack(bad, 0)
            with pytest.raises(AssertionError, match="the driver was reached"):
                bound(*good, stream=7, shared_mem=0)  # no binding: the resolver is asked

    rounds(200)  # caches warmed (interned names, error classes)
    tracemalloc.start()
    try:
        rounds(2000)
        first, _ = tracemalloc.get_traced_memory()
        rounds(2000)
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(x) for x in watched] == before
    assert second - first < 64 * 1024, f"{second - first} bytes more after 2000 more rounds"
