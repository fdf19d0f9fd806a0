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


def test_nvjitlink_code_is_ptxas_relocatable_code(
    tilec: ModuleType, kernels: ModuleType, settings: Any, ptxas_path: Path
) -> None:
    from tilec.backends.cuda import nvjitlink, ptxas

    try:
        nvjitlink.version()
    except tilec.ToolNotFoundError as exc:
        pytest.fail(f"the native tier needs nvJitLink (pip install -e '.[test]' brings it): {exc}")
    whole = tilec.compile(kernels.SIN_IR, target="sm_90", settings=settings, assembler="ptxas")
    linked = tilec.compile(kernels.SIN_IR, target="sm_90", settings=settings, assembler="nvjitlink")
    assert linked.metadata.assembler == "nvjitlink" and whole.metadata.assembler == "ptxas"
    assert linked.asm["ptx"] == whole.asm["ptx"]  # the same PTX went to both
    assert linked.asm["cubin"][:4] == b"\x7fELF"

    _, log = ptxas.assemble(ptxas_path, whole.asm["ptx"], "sm_90", ("-c",), 3)
    relocatable = ptxas.parse_verbose(log)["sin_scale"]
    got = (linked.metadata.registers, linked.metadata.stack_bytes)
    assert got == (relocatable.registers, relocatable.stack_bytes), (got, relocatable)
    # ... and that is not the default's code: whole program, sinf's slow path needs no stack.
    assert whole.metadata.stack_bytes == 0
    assert relocatable.stack_bytes > 0
    assert whole.metadata.registers != relocatable.registers
