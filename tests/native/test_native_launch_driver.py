"""tilec._launch against the fake libcuda (aot/fake_cuda.c): the driver is dlopen'ed at the first
bind, cuLaunchKernel receives the packed values, grid, block and shared memory, the resolver runs
once per context, and driver errors become tilec's CudaError. In a child process each, since a
process dlopens libcuda once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

CHILD = """
import ctypes, json, sys
import tilec
from tilec.backends.cuda import launch as L

lib = ctypes.CDLL("libcuda.so.1")
sizes = (ctypes.c_int * 4)(8, 8, 4, 8)
lib.fake_cuda_expect(b"exp_scale", sizes, 4)
fn = ctypes.c_void_p()
assert lib.cuModuleGetFunction(ctypes.byref(fn), None, b"exp_scale") == 0
sig = tilec.launch.Signature.from_llvm(
    "exp_scale", ["ptr addrspace(1)", "ptr addrspace(1)", "float", "i64"], ["x", "y", "s", "n"]
)
calls = []

def resolver():
    calls.append("resolve")
    ctx = ctypes.c_void_p()
    lib.cuCtxGetCurrent(ctypes.byref(ctx))
    if ctx.value:
        launcher.bind(ctx.value, fn.value, 0)

class Tensor:
    def __init__(self, ptr, device="cuda:0"):
        self.ptr, self.device = ptr, device
    def data_ptr(self):
        return self.ptr

launcher = L.native_launcher(sig, resolver)
out = {"loaded_before": tilec._launch.driver_loaded()}
try:
    {body}
except Exception as exc:
    out["error"] = [type(exc).__name__, str(exc)]
out["calls"] = calls
out["loaded_after"] = tilec._launch.driver_loaded()
out["launches"] = lib.fake_cuda_launches()
sys.stdout.flush()
print("RESULT " + json.dumps(out), flush=True)
"""


def _child(tilec: ModuleType, fake_cuda: Path, body: str, **env: str) -> tuple[dict[str, Any], list[str]]:
    full = dict(os.environ, LD_LIBRARY_PATH=str(fake_cuda), **env)
    full["PYTHONPATH"] = str(Path(tilec.__file__).resolve().parent.parent)
    code = textwrap.dedent(CHILD).replace("{body}", textwrap.indent(textwrap.dedent(body), "    ").strip())
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    result = json.loads(next(line for line in lines if line.startswith("RESULT "))[len("RESULT ") :])
    return result, [line for line in lines if line.startswith("fake: ")]


def test_launches_reach_cuLaunchKernel_with_the_packed_values(tilec: ModuleType, fake_cuda: Path) -> None:
    result, fake = _child(
        tilec,
        fake_cuda,
        """
        bound = launcher.config(4, 2, 1, 128, 1, 1)
        bound(Tensor(0x7F0000001000), 0x2000, 1.5, 2**64 - 1)
        bound(Tensor(0xA0), None, -2.0, -1, stream=7)
        launcher.launch((0x10, 0x20, 0.0, 5), 1, 1, 1, 32, 1, 1, 64 * 1024, None)
        launcher.launch((0x10, 0x20, 0.0, 5), 1, 1, 1, 32, 1, 1, 64 * 1024, None)
        """,
    )
    assert "error" not in result, result
    assert result["loaded_before"] is False and result["loaded_after"] is True  # dlopen at first bind
    assert result["calls"] == ["resolve"]  # bound once for the context
    assert result["launches"] == 4
    assert fake == [
        "fake: launch exp_scale grid=4,2,1 block=128,1,1 shared=0 args=7f0000001000,2000,3fc00000,ffffffffffffffff",
        "fake: launch exp_scale grid=4,2,1 block=128,1,1 shared=0 args=a0,0,c0000000,ffffffffffffffff",
        # Over 48 KiB of dynamic shared memory: allowed once per function, then launched.
        "fake: set attribute 8 = 65536 on exp_scale",
        "fake: launch exp_scale grid=1,1,1 block=32,1,1 shared=65536 args=10,20,0,5",
        "fake: launch exp_scale grid=1,1,1 block=32,1,1 shared=65536 args=10,20,0,5",
    ]


def test_bad_arguments_never_reach_the_driver(tilec: ModuleType, fake_cuda: Path) -> None:
    result, fake = _child(
        tilec,
        fake_cuda,
        """
        bound = launcher.config(1, 1, 1, 32, 1, 1)
        bound(Tensor(0x10), Tensor(0x20), 1.0, 4)
        try:
            bound(Tensor(0x10), Tensor(0x20, "cuda:1"), 1.0, 4)
        except tilec.LaunchArgumentError as exc:
            out["other_device"] = str(exc)
        bound(Tensor(0x10), Tensor(0x20, "cpu"), 1.0, 4)
        """,
    )
    assert result["error"] == [
        "LaunchArgumentError",
        "kernel 'exp_scale' argument 1 'y' (ptr addrspace(1)): got a tensor in cpu memory; a kernel needs "
        "device memory (move it first, e.g. tensor.cuda())",
    ]
    assert "is on cuda:1 but the kernel launches on the current device, cuda:0" in result["other_device"]
    assert result["launches"] == 1 and len(fake) == 1


def test_driver_errors_become_cuda_errors(tilec: ModuleType, fake_cuda: Path) -> None:
    result, _ = _child(
        tilec, fake_cuda, "launcher.launch((1, 2, 3.0, 4), 1, 1, 1, 1, 1, 1)", FAKE_CUDA_FAIL="cuLaunchKernel"
    )
    assert result["error"] == ["CudaError", "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED (719): fake description"]


def test_no_context_after_the_resolver_is_an_error(tilec: ModuleType, fake_cuda: Path) -> None:
    result, _ = _child(
        tilec, fake_cuda, "launcher.launch((1, 2, 3.0, 4), 1, 1, 1, 1, 1, 1)", FAKE_CUDA_NO_CONTEXT="1"
    )
    assert result["error"][0] == "CudaError" and "no function bound to the current context" in result["error"][1]
    assert result["calls"] == ["resolve"] and result["launches"] == 0
