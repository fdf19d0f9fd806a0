"""CUDA launch arguments: device pointers, checked and packed for cuLaunchKernel.

Two packers with one behaviour: the native one (`tilec._launch`, C++, used by launches) and
this pure-Python one, the reference. The native packer hands every argument it refuses to
`pack_bytes` here, so there is one text per error, and an object only Python understands
still launches. Neither needs a GPU: both can be compared byte for byte anywhere.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from ...errors import LaunchArgumentError, LaunchValueError
from ...launch import PackedArgs, Signature
from ...launch import pack_args as _pack_args

_POINTER_KINDS = (
    "a device pointer (a CUDA tensor or an object with data_ptr() or "
    "__cuda_array_interface__, a CUdeviceptr or an int)"
)


def _device_of(value: Any) -> tuple[str, int | None] | None:
    """(kind, index) of a tensor-like object's `device` (torch.device or "cuda:1"), if any."""
    dev = getattr(value, "device", None)
    if dev is None:
        return None
    if isinstance(dev, str):
        kind, _, idx = dev.partition(":")
        return kind, int(idx) if idx.isdigit() and len(idx) < 10 else None
    index = getattr(dev, "index", None)
    return str(getattr(dev, "type", "")), index


def _check_device(value: Any, where: str, device: int | None) -> None:
    found = _device_of(value)
    if found is None:
        return
    kind, index = found
    if kind != "cuda":
        raise LaunchArgumentError(
            f"{where}: got a tensor in {kind} memory; a kernel needs device memory "
            f"(move it first, e.g. tensor.cuda())"
        )
    if device is not None and index is not None and index != device:
        raise LaunchArgumentError(
            f"{where}: the tensor is on cuda:{index} but the kernel launches on the current "
            f"device, cuda:{device} (move the tensor, or make cuda:{index} current)"
        )


def _in_range(addr: int, where: str) -> int:
    if not 0 <= addr < 2**64:
        raise LaunchValueError(f"{where}: pointer value {addr:#x} is outside 0..2**64-1")
    return addr


def device_pointer(value: Any, where: str, device: int | None = None) -> int:
    """A device address from None, an int, an object with data_ptr() (torch; its `device` must
    be CUDA and, when `device` is given, that ordinal), one with __cuda_array_interface__,
    a CUdeviceptr or anything with __index__."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise LaunchArgumentError(f"{where}: expected {_POINTER_KINDS}, got bool")
    if type(value) is int:
        return _in_range(value, where)
    data_ptr = getattr(value, "data_ptr", None)
    if data_ptr is not None and callable(data_ptr):
        # Before __cuda_array_interface__: torch computes that dict per call (about 2 us),
        # and a host tensor has none, which used to end in torch's own TypeError.
        _check_device(value, where, device)
        addr = data_ptr()
        if isinstance(addr, bool) or not isinstance(addr, int):
            raise LaunchValueError(
                f"{where}: data_ptr() returned {type(addr).__name__}, not an int"
            )
        return _in_range(addr, where)
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        try:
            data = cai["data"]
            addr = int(data[0])
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise LaunchValueError(f"{where}: malformed __cuda_array_interface__: {exc}") from exc
        if cai.get("mask") is not None:
            raise LaunchValueError(f"{where}: masked arrays are not supported")
        return _in_range(addr, where)
    if isinstance(value, (float, complex, str, bytes)):
        raise LaunchArgumentError(f"{where}: expected {_POINTER_KINDS}, got {type(value).__name__}")
    if type(value).__name__ == "CUdeviceptr" or isinstance(value, int):
        addr = int(value)
    elif hasattr(value, "__index__"):
        addr = operator.index(value)
    else:
        raise LaunchArgumentError(f"{where}: expected {_POINTER_KINDS}, got {type(value).__name__}")
    return _in_range(addr, where)


def pack_args(sig: Signature, args: Sequence[Any], device: int | None = None) -> PackedArgs:
    """Check and pack `args` for cuLaunchKernel; raises before anything reaches the driver.
    `device`: the current device's ordinal, which tensors must be on (None: not checked)."""
    return _pack_args(sig, args, functools.partial(_pointer, device=device))


def _pointer(value: Any, where: str, device: int | None) -> int:
    return device_pointer(value, where, device)


def pack_bytes(sig: Signature, args: Sequence[Any], device: int | None = None) -> bytes:
    """The reference packing as bytes (see PackedArgs.to_bytes); the native packer's fallback."""
    return pack_args(sig, args, device).to_bytes()


@functools.cache
def native() -> ModuleType | None:
    """tilec._launch, or None where it was not built (a source tree without the extension)."""
    try:
        from ... import _launch  # type: ignore[attr-defined]
    except ImportError:
        return None
    mod: ModuleType = _launch
    return mod


def native_launcher(sig: Signature, resolver: Callable[[], None]) -> Any | None:
    """A `tilec._launch.Launcher` for `sig`, built once per kernel: it packs in C++ and calls
    cuLaunchKernel; `resolver()` binds the kernel's function for the current context."""
    mod = native()
    if mod is None:
        return None
    return mod.Launcher(
        str(sig),
        [p.kind for p in sig.params],
        functools.partial(_fallback, sig),
        resolver,
    )


def _fallback(sig: Signature, args: tuple[Any, ...], device: int | None) -> bytes:
    return pack_bytes(sig, args, device)
