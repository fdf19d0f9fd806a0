"""`assembler="nvjitlink"` for real (no GPU needed): nvJitLink, with the options tilec passes
(`-no-cache` among them), compiles PTX as relocatable device code, the way `ptxas -c` does, and so
not to the code of ptxas's whole-program default. libdevice's sinf shows it in the resources the
assemblers report: whole program keeps its slow path in registers; compiled relocatably it uses a
32-byte local array. This is why ptxas stays tilec's default (bench/tilec_assembler.py compares
the SASS of every bench kernel).

Needs libnvJitLink: the test extras install the nvidia-nvjitlink wheel beside cuda-bindings."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

SIN_IR = """\
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_sinf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()

define void @sin_only(ptr addrspace(1) %x, ptr addrspace(1) %y, i32 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %bdim = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %bid, %bdim
  %i = add i32 %base, %tid
  %ok = icmp slt i32 %i, %n
  br i1 %ok, label %body, label %done
body:
  %px = getelementptr inbounds float, ptr addrspace(1) %x, i32 %i
  %v = load float, ptr addrspace(1) %px, align 4
  %s = call float @__nv_sinf(float %v)
  %py = getelementptr inbounds float, ptr addrspace(1) %y, i32 %i
  store float %s, ptr addrspace(1) %py, align 4
  br label %done
done:
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{ptr @sin_only, !"kernel", i32 1}
"""


def test_nvjitlink_code_is_ptxas_relocatable_code(tilec: ModuleType, settings: Any, ptxas_path: Path) -> None:
    from tilec.backends.cuda import nvjitlink, ptxas

    try:
        nvjitlink.version()
    except tilec.ToolNotFoundError as exc:
        pytest.fail(f"the native tier needs nvJitLink (pip install -e '.[test]' brings it): {exc}")
    whole = tilec.compile(SIN_IR, target="sm_90", settings=settings)
    linked = tilec.compile(SIN_IR, target="sm_90", settings=settings, assembler="nvjitlink")
    assert linked.metadata.assembler == "nvjitlink" and whole.metadata.assembler == "ptxas"
    assert linked.asm["ptx"] == whole.asm["ptx"]  # the same PTX went to both
    assert linked.asm["cubin"][:4] == b"\x7fELF"

    _, log = ptxas.assemble(ptxas_path, whole.asm["ptx"], "sm_90", ("-c",), 3)
    relocatable = ptxas.parse_verbose(log)["sin_only"]
    got = (linked.metadata.registers, linked.metadata.stack_bytes)
    assert got == (relocatable.registers, relocatable.stack_bytes), (got, relocatable)
    # ... and that is not the default's code: whole program, sinf's slow path needs no stack.
    assert whole.metadata.stack_bytes == 0
    assert relocatable.stack_bytes > 0
    assert whole.metadata.registers != relocatable.registers
