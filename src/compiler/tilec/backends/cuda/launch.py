"""CUDA launch arguments: device pointers, packed for cuLaunchKernel (pure Python, no GPU)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ...errors import LaunchArgumentError, LaunchValueError
from ...launch import PackedArgs, Signature
from ...launch import pack_args as _pack_args


def device_pointer(value: Any, where: str) -> int:
    """A device address from a __cuda_array_interface__ object, CUdeviceptr, int or None."""
    if value is None:
        return 0
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        try:
            data = cai["data"]
            addr = int(data[0])
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise LaunchValueError(f"{where}: malformed __cuda_array_interface__: {exc}") from exc
        if cai.get("mask") is not None:
            raise LaunchValueError(f"{where}: masked arrays are not supported")
        return addr
    if isinstance(value, (bool, float, complex, str, bytes)):
        raise LaunchArgumentError(
            f"{where}: expected a device pointer (an object with __cuda_array_interface__, "
            f"a CUdeviceptr or an int), got {type(value).__name__}"
        )
    if type(value).__name__ == "CUdeviceptr" or isinstance(value, int):
        addr = int(value)
    elif hasattr(value, "__index__"):
        addr = operator.index(value)
    else:
        raise LaunchArgumentError(
            f"{where}: expected a device pointer (an object with __cuda_array_interface__, "
            f"a CUdeviceptr or an int), got {type(value).__name__}"
        )
    if not 0 <= addr < 2**64:
        raise LaunchValueError(f"{where}: pointer value {addr:#x} is outside 0..2**64-1")
    return addr


def pack_args(sig: Signature, args: Sequence[Any]) -> PackedArgs:
    """Check and pack `args` for cuLaunchKernel; raises before anything reaches the driver."""
    return _pack_args(sig, args, device_pointer)
