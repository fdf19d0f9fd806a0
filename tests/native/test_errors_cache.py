from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

BAD_IR = """\
define void @k(ptr addrspace(1) %p) {
entry:
  store i32 1, ptr addrspace(1) %p
  ret i32 %undefined_value
}
"""


def test_invalid_ir_names_line_and_column(tilec: ModuleType, settings: Any) -> None:
    with pytest.raises(tilec.IRError) as info:
        tilec.compile(BAD_IR, settings=settings)
    err = info.value
    assert (err.line, err.column) == (4, 7)
    assert ":4:7:" in str(err)
    assert "ret i32 %undefined_value" in str(err)
    assert isinstance(err, ValueError)


def test_verifier_error_is_ir_error(tilec: ModuleType, settings: Any) -> None:
    bad = "define void @k() {\nentry:\n  br label %entry2\nentry2:\n}\n"
    with pytest.raises(tilec.IRError):
        tilec.compile(bad, settings=settings)
    unverifiable = (
        "define i32 @k(i32 %a) {\nentry:\n"
        "  %x = add i32 %y, 1\n  %y = add i32 %x, 1\n  ret i32 %x\n}\n"
    )
    with pytest.raises(tilec.IRError, match=r"(?i)dominate"):
        tilec.compile(unverifiable, settings=settings)


def test_no_kernel_is_a_clear_error(tilec: ModuleType, settings: Any) -> None:
    with pytest.raises(tilec.CompileError, match="exactly one kernel"):
        tilec.compile("define void @f() {\n  ret void\n}\n", settings=settings)


def test_ptxas_failure_carries_command_and_repro(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    with pytest.raises(tilec.PtxasError) as info:
        tilec.compile(
            kernels.EXP_IR,
            target="sm_90",
            ptxas_options=("--no-such-flag",),
            settings=settings,
            assembler="ptxas",
        )
    err = info.value
    assert err.returncode != 0
    msg = str(err)
    assert "exit code" in msg and "--no-such-flag" in msg and "repro:" in msg
    ptx_file = Path(err.command[err.command.index("-o") - 1])
    assert ptx_file.is_file() and ".entry exp_scale" in ptx_file.read_text()


def test_missing_libdevice_override(tilec: ModuleType, kernels: ModuleType, tmp_path: Path) -> None:
    s = tilec.Settings.from_env(
        # a cache directory of its own: the tools' facts are kept there even with the cache off
        {"TILEC_CACHE": "0", "TILEC_CACHE_DIR": str(tmp_path / "c"), "TILEC_LIBDEVICE": str(tmp_path / "nope.bc"),
         "PATH": ""}
    )
    with pytest.raises(tilec.ToolNotFoundError, match="TILEC_LIBDEVICE"):
        tilec.compile(kernels.EXP_IR, settings=s)


def test_libdevice_override_is_used(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    import dataclasses

    path = Path("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc")
    s = dataclasses.replace(settings, libdevice=path, cache_enabled=False)
    k = tilec.compile(kernels.EXP_IR, settings=s)
    assert k.metadata.libdevice == str(path)


def test_cache_miss_hit_corrupt_disabled(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    first = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    assert first.cache_status == "miss"
    second = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    assert second.cache_status == "hit"
    assert second.asm == first.asm and second.key == first.key
    assert second.metadata.registers == first.metadata.registers
    other = tilec.compile(kernels.EXP_IR, target="sm_80", settings=settings)
    assert other.cache_status == "miss" and other.key != first.key

    entry = tilec.compiler.Cache(settings.cache_dir).path(first.key)
    assert entry.is_file()
    assert not list(entry.parent.glob("*.tmp"))  # atomic write left no temp file
    raw = entry.read_bytes()
    assert first.asm["ptx"].encode() in raw  # stages are stored as they are, not re-encoded
    entry.write_bytes(raw.replace(b".entry", b".entrx", 1))  # one byte: the digest no longer matches
    rebuilt = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    assert rebuilt.cache_status == "corrupt"
    assert rebuilt.asm["ptx"] == first.asm["ptx"]
    assert tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings).cache_status == "hit"

    entry.write_bytes(b"\x00\xff not json")  # truncated / binary junk
    again = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    assert again.cache_status == "corrupt" and again.asm["cubin"] == first.asm["cubin"]

    import dataclasses

    off = tilec.compile(
        kernels.EXP_IR, target="sm_90", settings=dataclasses.replace(settings, cache_enabled=False)
    )
    assert off.cache_status == "disabled"


def test_cache_env_settings(tilec: ModuleType, tmp_path: Path) -> None:
    s = tilec.Settings.from_env({"TILEC_CACHE": "0", "TILEC_CACHE_DIR": str(tmp_path)})
    assert not s.cache_enabled and s.cache_dir == tmp_path
    assert tilec.Settings.from_env({"HOME": str(tmp_path)}).cache_enabled
