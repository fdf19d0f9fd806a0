"""Stage dumps: TILEC_DUMP_DIR / dump_dir= write every stage (SASS through nvdisasm or
cuobjdump when present), TILEC_DUMP_PASSES / dump_passes= the IR after every LLVM pass,
and `kernel.asm[...]` maps stage names to their outputs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

STAGES = ("llir", "llir_opt", "ptx", "cubin")


@pytest.fixture
def fake_nvdisasm(tmp_path: Path) -> Path:
    """Stands in for nvdisasm: checks it was handed a cubin and prints a marker."""
    tool = tmp_path / "bin" / "nvdisasm"
    tool.parent.mkdir()
    tool.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        data = open(sys.argv[-1], "rb").read()
        if data[:4] != b"\\x7fELF":
            sys.exit("not a cubin")
        print("FAKE SASS", " ".join(sys.argv[1:-1]), len(data))
    """)
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def _with(settings: Any, tilec: ModuleType, **env: str) -> Any:
    base = {
        "TILEC_CACHE_DIR": str(settings.cache_dir),
        "TILEC_PTXAS": str(settings.ptxas),
        "CUDA_HOME": str(settings.cuda_home),
        "PATH": "",
    }
    return tilec.Settings.from_env({**base, **env})


def test_dump_dir_writes_every_stage_and_sass(
    tilec: ModuleType, kernels: ModuleType, settings: Any, fake_nvdisasm: Path, tmp_path: Path
) -> None:
    s = _with(settings, tilec, TILEC_DUMP_DIR=str(tmp_path / "dumps"), TILEC_NVDISASM=str(fake_nvdisasm))
    k = tilec.compile(kernels.EXP_IR, target="cuda:90", settings=s)
    d = tmp_path / "dumps" / f"exp_scale-{k.key[:12]}"
    names = sorted(p.name for p in d.iterdir())
    assert names == sorted([*(f"exp_scale.{st}" for st in (*STAGES, "sass")), "exp_scale.json"])
    for st in STAGES:
        on_disk = (d / f"exp_scale.{st}").read_bytes()
        value = k.asm[st]
        assert on_disk == (value if isinstance(value, bytes) else value.encode()), st
    assert (d / "exp_scale.sass").read_text() == f"FAKE SASS -c -g {len(k.asm['cubin'])}\n"
    assert k.asm["sass"] == (d / "exp_scale.sass").read_text()
    assert list(k.asm) == list(STAGES)  # sass is derived on demand, not a produced stage
    # A cache hit dumps too.
    s2 = _with(settings, tilec, TILEC_DUMP_DIR=str(tmp_path / "again"), TILEC_NVDISASM=str(fake_nvdisasm))
    hit = tilec.compile(kernels.EXP_IR, target="cuda:90", settings=s2)
    assert hit.cache_status == "hit"
    assert (tmp_path / "again" / f"exp_scale-{k.key[:12]}" / "exp_scale.ptx").is_file()


def test_sass_from_the_real_tools_when_present(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path
) -> None:
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings, dump_dir=tmp_path)
    tool = tilec.backends.cuda.toolchain.find_cuda_tool(settings, "nvdisasm") or tilec.backends.cuda.toolchain.find_cuda_tool(settings, "cuobjdump")
    sass_files = list(tmp_path.glob("*/exp_scale.sass"))
    if tool is None:
        with pytest.raises(tilec.ToolNotFoundError, match="SASS needs nvdisasm or cuobjdump"):
            k.asm["sass"]
        assert sass_files == []
    else:
        assert "exp_scale" in k.asm["sass"] and "EXIT" in k.asm["sass"]
        assert len(sass_files) == 1


def test_asm_maps_stage_names(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    k = tilec.compile(kernels.EXP_IR, target="sm_80", settings=settings)
    assert ".entry exp_scale(" in k.asm["ptx"] and k.asm["cubin"][:4] == b"\x7fELF"
    assert "define void @exp_scale" in k.asm["llir"] and "__nv_expf" not in k.asm["llir_opt"]
    with pytest.raises(KeyError, match=r"no stage 'nope'; stages: llir, llir_opt, ptx, cubin; on demand: sass"):
        k.asm["nope"]


def test_pass_dumps(tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path) -> None:
    first = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings)
    assert first.passes == ()
    s = _with(settings, tilec, TILEC_DUMP_PASSES="1", TILEC_DUMP_DIR=str(tmp_path / "d"))
    assert s.dump_passes is True
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=s)
    # Never a cache hit: pass dumps need a compile.
    assert k.cache_status != "hit" and k.key == first.key
    names = [p.pass_name for p in k.passes]
    assert len(names) > 50
    for expected in ("NVVMReflectPass", "SROAPass", "InstCombinePass", "GVNPass", "SimplifyCFGPass"):
        assert expected in names, expected
    assert not any("PassManager" in n or "PassAdaptor" in n for n in names)
    # The first dumps still have the linked libdevice function.
    assert any("__nv_expf" in p.ir for p in k.passes[:5])
    files = sorted((tmp_path / "d" / f"exp_scale-{k.key[:12]}" / "exp_scale.passes").iterdir())
    assert len(files) == len(k.passes)
    assert files[0].name.startswith("0000-") and files[0].read_text().startswith("; IR after ")
    # After the last pass the IR is the llir_opt stage (the module-level dumps hold all of it).
    last_module = [p for p in k.passes if p.unit == "module"][-1]
    assert "define void @exp_scale" in last_module.ir


def test_cli_compile_with_dumps(tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path) -> None:
    src = tmp_path / "exp.ll"
    src.write_text(kernels.EXP_IR)
    env = dict(
        os.environ,
        PYTHONPATH=str(Path(tilec.__file__).resolve().parent.parent),
        TILEC_CACHE_DIR=str(settings.cache_dir),
        TILEC_PTXAS=str(settings.ptxas),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tilec",
            "compile",
            str(src),
            "--target",
            "cuda:80",
            "--dump-dir",
            str(tmp_path / "out"),
            "--dump-passes",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("exp_scale for cuda:sm_80")
    for st in STAGES:
        assert f"  {st} " in proc.stdout
    (out,) = (tmp_path / "out").iterdir()
    assert (out / "exp_scale.ptx").is_file() and any((out / "exp_scale.passes").iterdir())
