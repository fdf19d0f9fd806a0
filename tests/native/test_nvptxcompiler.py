"""assembler="nvptxcompiler": the shim linked here against the installed library, what `auto`
chooses and why, and the errors a user sees (library missing, no C++ compiler, an arch the
library's release does not know, a driver older than the assembler)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native


def test_the_shim_exports_its_three_functions_and_needs_no_libstdcxx(
    tilec: ModuleType, kernels: ModuleType, settings: Any
) -> None:
    from tilec.backends.cuda import backend, nvptxcompiler, toolchain

    nvptxcompiler._SHIMS.clear()  # loaded by an earlier test from its own cache: built here now
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings, assembler="nvptxcompiler")
    assert k.metadata.assembler == "nvptxcompiler" and k.asm["cubin"][:4] == b"\x7fELF"
    lib = backend.nvptxcompiler_library(settings)
    shim = nvptxcompiler.shim_path(lib, toolchain.memo_dir(settings))
    assert shim.is_file(), "built under the cache's tools directory, named by the library"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(shim)], capture_output=True, text=True, check=True)
    exported = sorted(line.split()[-1] for line in symbols.stdout.splitlines())
    assert exported == ["tilec_nvptxc_compile", "tilec_nvptxc_free", "tilec_nvptxc_version"]
    dynamic = subprocess.run(["readelf", "-d", str(shim)], capture_output=True, text=True, check=True).stdout
    needed = sorted(line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line)
    assert not [n for n in needed if "stdc++" in n or "gcc_s" in n], needed  # libstdc++ is inside
    # A second process with this cache loads the shim built by the first: no C++ compiler needed.
    again = dataclasses.replace(settings, cxx=Path("/nonexistent/g++"))
    nvptxcompiler._SHIMS.clear()
    k2 = tilec.compile(kernels.SIN_IR, target="sm_90", settings=again, assembler="nvptxcompiler")
    assert k2.metadata.assembler == "nvptxcompiler"


def test_a_missing_library_says_what_to_install(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path
) -> None:
    wrong = dataclasses.replace(settings, nvptxcompiler=tmp_path / "nowhere")
    with pytest.raises(tilec.ToolNotFoundError, match=r"TILEC_NVPTXCOMPILER=.*nowhere holds no libnvptxcompiler_static.a"):
        tilec.compile(kernels.EXP_IR, target="sm_90", settings=wrong, assembler="nvptxcompiler")
    from tilec.backends.cuda import backend, toolchain

    original = toolchain._nvptxcompiler
    try:
        toolchain._nvptxcompiler = lambda s, m: (None, None)  # as if nothing were installed
        toolchain._IDENTITY.clear()
        fresh = dataclasses.replace(settings, cache_dir=tmp_path / "c")
        with pytest.raises(tilec.ToolNotFoundError, match=r"pip install nvidia-nvptxcompiler"):
            tilec.compile(kernels.EXP_IR, target="sm_90", settings=fresh, assembler="nvptxcompiler")
        k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=fresh)
        assert k.metadata.assembler == "ptxas"
        assert k.metadata.assembler_note.startswith("auto: ptxas (no nvPTXCompiler library: pip install")
        assert backend.CudaBackend.assembler(k.target, backend.CudaOptions(), fresh).name == "ptxas"
    finally:
        toolchain._nvptxcompiler = original
        toolchain._IDENTITY.clear()


def test_no_cxx_compiler(tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path) -> None:
    from tilec.backends.cuda import nvptxcompiler

    nvptxcompiler._SHIMS.clear()
    none = dataclasses.replace(settings, cache_dir=tmp_path / "c", cxx=tmp_path / "no-g++")
    with pytest.raises(tilec.ToolNotFoundError, match=r"no C\+\+ compiler was found: install g\+\+ .* or set TILEC_CXX"):
        tilec.compile(kernels.EXP_IR, target="sm_90", settings=none, assembler="nvptxcompiler")
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=none)
    assert k.metadata.assembler == "ptxas"
    assert "fell back to ptxas: the nvPTXCompiler library" in k.metadata.assembler_note
    assert "no C++ compiler was found" in k.metadata.assembler_note
    assert k.metadata.ptxas_log.startswith("tilec: auto: nvPTXCompiler") and "fell back to ptxas" in k.metadata.ptxas_log


def test_a_failed_link_shows_the_command(tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path) -> None:
    from tilec.backends.cuda import nvptxcompiler

    nvptxcompiler._SHIMS.clear()
    broken = tmp_path / "g++"
    broken.write_text("#!/bin/sh\necho 'cannot find -lstdc++' >&2\nexit 1\n")
    broken.chmod(0o755)
    bad = dataclasses.replace(settings, cache_dir=tmp_path / "c", cxx=broken)
    with pytest.raises(tilec.ToolError) as info:
        tilec.compile(kernels.EXP_IR, target="sm_90", settings=bad, assembler="nvptxcompiler")
    text = str(info.value)
    assert "linking the nvPTXCompiler shim (needs g++ with a static libstdc++)" in text
    assert "cannot find -lstdc++" in text and "-static-libstdc++" in text and "repro:" in text
    assert not list((tmp_path / "c" / "tools").glob(".nvptxcompiler-*")), "its work directory is removed"
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=bad)  # auto: ptxas, and says why
    assert k.metadata.assembler == "ptxas"
    assert "fell back to ptxas: linking the nvPTXCompiler shim" in k.metadata.assembler_note


def test_auto_keeps_ptxas_of_another_release(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path
) -> None:
    """A ptxas of another release than the library's: auto keeps ptxas, whose code is what the
    user got before (the library gives its own release's ptxas code)."""
    real = settings.ptxas
    other = tmp_path / "bin" / "ptxas"
    other.parent.mkdir()
    other.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 12.4, V12.4.131"; exit 0; fi\n'
        f'exec {real} "$@"\n'
    )
    other.chmod(0o755)
    older = dataclasses.replace(settings, ptxas=other)
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=older)
    assert k.metadata.assembler == "ptxas" and k.metadata.ptxas_version == "12.4.131"
    assert k.metadata.assembler_note.startswith("auto: ptxas 12.4.131, as nvPTXCompiler 13.0.88 (")
    assert k.metadata.assembler_note.endswith(") is of another release")


def test_arch_and_release(tilec: ModuleType) -> None:
    from tilec.backends.cuda import arch, nvptxcompiler

    assert arch.release_problem("sm_90", "13.0.88") is None
    assert arch.release_problem("sm_100", "12.4.131") == "sm_100 needs CUDA 12.8 or newer, this is CUDA 12.4"
    assert arch.release_problem("sm_110", "12.9.86") == "sm_110 needs CUDA 13.0 or newer, this is CUDA 12.9"
    assert arch.release_problem("sm_101", "13.0.88") == "CUDA 12.9 was the last to know sm_101"
    assert arch.release_problem("sm_70", "13.0.88") == "CUDA 13.0 no longer compiles for sm_70 (CUDA 12.9 was the last)"
    assert arch.release_problem("sm_70", "12.9.86") is None
    lib = nvptxcompiler.Library(Path("/x/lib/libnvptxcompiler_static.a"), Path("/x/include"), "12.4.131", "0" * 64)
    with pytest.raises(tilec.TargetError, match=r"nvPTXCompiler 12.4.131 .* cannot compile for sm_100: sm_100 needs CUDA 12.8"):
        nvptxcompiler.check_arch(lib, "sm_100")


def test_the_library_s_own_refusal_of_an_arch(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    """The real library (13.0) asked for an arch it dropped: the table answers before it runs, and
    the library's own message is turned into the same advice where the table is silent."""
    from tilec.backends.cuda import backend, nvptxcompiler, toolchain

    lib = backend.nvptxcompiler_library(settings)
    shim = nvptxcompiler.load(lib, settings, toolchain.memo_dir(settings))
    ptx = tilec.compile(kernels.EXP_IR, target="sm_90", settings=settings).asm["ptx"]
    with pytest.raises(tilec.TargetError, match=r"cannot compile for sm_70: CUDA 13\.0 no longer compiles for sm_70"):
        nvptxcompiler.assemble(shim, lib, ptx, "sm_70", (), 3)
    unknown = dataclasses.replace(lib, version="unknown")  # no table entry applies
    with pytest.raises(tilec.TargetError, match=r"nvPTXCompiler unknown does not know sm_70 \(.*gpu-name"):
        nvptxcompiler.assemble(shim, unknown, ptx, "sm_70", (), 3)
    with pytest.raises(tilec.PtxasError, match=r"NVPTXCOMPILE_ERROR_COMPILATION_FAILURE[\s\S]*repro: ptxas -arch=sm_90"):
        nvptxcompiler.assemble(shim, lib, ptx.replace("ret;", "bogus;"), "sm_90", (), 3)


def test_a_driver_older_than_the_assembler(tilec: ModuleType) -> None:
    from tilec.backends.cuda import driver

    assert driver.too_new("13.0.88", 13000) is None
    assert driver.too_new("13.0.88", 13020) is None
    assert driver.too_new("12.4.131", 13000) is None
    assert driver.too_new(None, 12040) is None
    assert driver.too_new("13.0.88", 12080) == (
        "the cubin was assembled by CUDA 13.0.88, which needs a driver for CUDA 13.0 or newer, "
        "and this driver supports CUDA 12.8"
    )


def test_a_hit_through_a_shortcut_stays_trusted_and_loads_nothing(
    tilec: ModuleType, kernels: ModuleType, settings_env: dict[str, str]
) -> None:
    """auto's choice is vouched for by the watched files (the library's among them), so a fresh
    process's hit through a shortcut neither asks for the tools' identity nor loads the shim."""
    code = (
        "import sys, tilec\n"
        "from tilec.backends.cuda import toolchain\n"
        "toolchain.identity = None  # a hit that asked would fail\n"
        "k = tilec.compile(sys.argv[1], target='sm_90', source_key='exp@1')\n"
        "assert k.cache_status == 'hit', k.cache_status\n"
        "assert 'nvptxcompiler-' not in open('/proc/self/maps').read(), 'the shim was loaded'\n"
        "print(k.metadata.assembler)\n"
    )
    env = {**os.environ, **settings_env, "PYTHONPATH": str(Path(tilec.__file__).resolve().parent.parent)}
    first = subprocess.run(
        [sys.executable, "-c", "import sys, tilec; tilec.compile(sys.argv[1], target='sm_90', source_key='exp@1')", kernels.EXP_IR],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    proc = subprocess.run([sys.executable, "-c", code, kernels.EXP_IR], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "nvptxcompiler"


def _cli(tilec: ModuleType, settings: Any, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(
        os.environ,
        PYTHONPATH=str(Path(tilec.__file__).resolve().parent.parent),
        TILEC_CACHE_DIR=str(settings.cache_dir),
        TILEC_PTXAS=str(settings.ptxas),
        **env,
    )
    return subprocess.run([sys.executable, "-m", "tilec", *args], capture_output=True, text=True, env=full, check=False)


def test_the_cli_says_which_assembler_and_why(tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path) -> None:
    auto = _cli(tilec, settings, "assembler")
    assert auto.returncode == 0, auto.stderr
    lines = auto.stdout.splitlines()
    assert lines[0].startswith("cuda:sm_90: nvptxcompiler (auto: nvPTXCompiler 13.0.88 (the release of ptxas ")
    assert lines[1] == f"ptxas: {settings.ptxas} 13.0.88"
    assert lines[2].startswith("nvPTXCompiler: 13.0.88 ") and lines[2].endswith("libnvptxcompiler_static.a")
    assert lines[3].startswith("  its shim: ") and lines[4].startswith("  linked with: ")
    named = _cli(tilec, settings, "assembler", "--assembler", "ptxas")
    assert named.stdout.splitlines()[0] == "cuda:sm_90: ptxas"
    from_env = _cli(tilec, settings, "assembler", TILEC_ASSEMBLER="nvjitlink")
    assert from_env.stdout.splitlines()[0] == "cuda:sm_90: nvjitlink"
    bad = _cli(tilec, settings, "assembler", TILEC_ASSEMBLER="nvcc")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "TILEC_ASSEMBLER must be one of auto, ptxas, nvptxcompiler, nvjitlink, got 'nvcc'" in bad.stderr
    src = tmp_path / "exp.ll"
    src.write_text(kernels.EXP_IR)
    out = _cli(tilec, settings, "aot", str(src), "--assembler", "ptxas", "-o", str(tmp_path / "aot"))
    assert out.returncode == 0, out.stderr
    import json

    spec = json.loads(next((tmp_path / "aot").glob("*.json")).read_text())
    assert spec["metadata"]["assembler"] == "ptxas" and spec["metadata"]["ptxas_version"] == "13.0.88"


def test_a_cache_that_cannot_be_written_links_the_shim_privately(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path
) -> None:
    from tilec.backends.cuda import nvptxcompiler

    nvptxcompiler._SHIMS.clear()
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache would be")
    k = tilec.compile(kernels.EXP_IR, target="sm_90", settings=dataclasses.replace(settings, cache_dir=blocked))
    assert k.metadata.assembler == "nvptxcompiler"
    loaded = next(iter(nvptxcompiler._SHIMS.values()))
    assert loaded.path.parent == nvptxcompiler._private_dir() and blocked.read_text().startswith("a file")


def test_the_cli_piped_into_a_reader_that_stops_early(child_env: dict[str, str], tmp_path: Path) -> None:
    """`tilec assembler | head -1`: the first line, and no traceback from the pipe closing."""
    err = tmp_path / "stderr"
    # a reader that closes at once, then a long answer: the pipe is gone before tilec has written
    cmd = f"{shlex.quote(sys.executable)} -m tilec assembler 2>{shlex.quote(str(err))} | true; echo ${{PIPESTATUS[0]}}"
    # the settings' PATH is empty (tools come from their variables); bash itself is found on this one
    env = {**child_env, "PATH": os.environ.get("PATH", "")}
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, check=False)
    assert err.read_text() == "" and proc.stdout.strip() in ("0", "141"), (proc.stdout, err.read_text())


# A compile through nvPTXCompiler by name in a fresh process, with the environment the test gives it.
COMPILE_NAMED = """
import sys, tilec
k = tilec.compile(open(sys.argv[1]).read(), target="sm_90", settings=tilec.Settings.from_env(), assembler="nvptxcompiler")
print(k.cache_status, k.metadata.assembler)
"""


def test_with_the_cache_off_the_shim_is_linked_once_not_in_every_process(
    kernels: ModuleType, child_env: dict[str, str], tmp_path: Path
) -> None:
    """TILEC_CACHE=0 keeps no compiled kernels, but the machine's tools are still found and the shim
    linked once per library under <cache>/tools: a second process with no compiler to link with
    assembles in process all the same, and the cache directory holds nothing but tools."""
    src = tmp_path / "exp.ll"
    src.write_text(kernels.EXP_IR)
    cache = tmp_path / "cache"
    env = {**child_env, "TILEC_CACHE": "0", "TILEC_CACHE_DIR": str(cache)}

    def compile_in_a_new_process(**extra: str) -> str:
        proc = subprocess.run([sys.executable, "-c", COMPILE_NAMED, str(src)], capture_output=True, text=True,
                              env={**env, **extra}, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.strip()

    assert compile_in_a_new_process() == "disabled nvptxcompiler"
    assert [p.name for p in cache.iterdir()] == ["tools"]
    assert list((cache / "tools").glob("nvptxcompiler-*.so")), sorted(p.name for p in (cache / "tools").iterdir())
    assert compile_in_a_new_process(TILEC_CXX=str(tmp_path / "no-g++")) == "disabled nvptxcompiler"


def test_the_cli_links_the_shim_ahead_and_says_why_it_cannot(child_env: dict[str, str], tmp_path: Path) -> None:
    """`tilec assembler --link` (an image's build step): the shim kept under <cache>/tools, found
    by the next call; no compiler, or a cache directory it cannot write, is one line and exit 1."""
    def cli(cache: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tilec", "assembler", "--link"], capture_output=True, text=True,
                              env={**child_env, "TILEC_CACHE_DIR": str(cache), **extra}, check=False)

    done = cli(tmp_path / "c")
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "c" / "tools").glob("nvptxcompiler-*.so"))
    assert "(built)" in done.stdout and "its shim: " + str(tmp_path / "c" / "tools") in done.stdout
    no_cxx = cli(tmp_path / "d", TILEC_CXX=str(tmp_path / "no-g++"))
    assert no_cxx.returncode == 1 and "no C++ compiler was found" in no_cxx.stderr
    assert no_cxx.stderr.startswith("tilec assembler: error: ") and "Traceback" not in no_cxx.stderr
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    unwritable = cli(blocked)
    assert unwritable.returncode == 1 and "cannot be written" in unwritable.stderr, unwritable.stderr
    assert "Traceback" not in unwritable.stderr and blocked.read_text() == "not a directory"
