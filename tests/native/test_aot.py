"""AOT C launchers and aot-link dispatchers, compiled with gcc against the CUDA headers.

The generated C runs against a fake libcuda (aot/fake_cuda.c) that counts and
prints driver calls, so lazy once-only loading, error checking, argument passing
and dispatch are exercised without a GPU. The GPU tier runs the same code for real.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.native

HERE = Path(__file__).resolve().parent
CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
CUDA_INCLUDE = CUDA / "include"
STUBS = CUDA / "lib64" / "stubs" / "libcuda.so"
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _vadd(tilec: ModuleType, kernels: ModuleType) -> Any:
    return kernels.vector_add(tilec.ir)


def _aot(tilec: ModuleType, kernels: ModuleType, settings: Any, **kw: Any) -> Any:
    kw.setdefault("block", 256)
    kw.setdefault("target", "cuda:90")
    return tilec.aot.compile(_vadd(tilec, kernels), settings=settings, **kw)


def _driver(cc: str, lib_dir: Path, fake: Path) -> Path:
    exe = lib_dir / "driver"
    _run(
        [
            cc,
            *CFLAGS,
            "-pthread",
            f"-I{lib_dir}",
            f"-I{CUDA_INCLUDE}",
            "-o",
            str(exe),
            str(HERE / "aot" / "driver.c"),
            str(lib_dir / "vaddlib.c"),
            f"-L{fake}",
            "-l:libcuda.so.1",
            "-pthread",
        ]
    )
    return exe


def _drive(exe: Path, fake: Path, *args: str, **env: str) -> str:
    full = dict(os.environ, LD_LIBRARY_PATH=str(fake), **env)
    return _run([str(exe), *args], env=full).stdout


def _library(tilec: ModuleType, kernels: list[Any], tmp_path: Path) -> Path:
    lib_dir = tmp_path / "lib"
    tilec.aot.link(kernels, "vaddlib").write(lib_dir)
    return lib_dir


def _c_array(source: str, name: str) -> bytes:
    m = re.search(rf"static const unsigned char {name}\[(\d+)\][^=]*= \{{(.*?)\}};", source, re.S)
    assert m, f"no array {name}"
    data = bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", m.group(2)))
    assert len(data) == int(m.group(1))
    return data


# -- the generated files ---------------------------------------------------------------
@pytest.mark.parametrize("embed_ptx", [False, True])
def test_aot_sources_compile_and_carry_the_specialization(
    tilec: ModuleType, kernels: ModuleType, settings: Any, cc: str, tmp_path: Path, embed_ptx: bool
) -> None:
    k = _aot(tilec, kernels, settings, constants={"n": 1024}, embed_ptx=embed_ptx)
    assert k.name == "vadd_n_1024_sm90" and k.entry == "vadd__n_1024"
    files = sorted(p.name for p in k.write(tmp_path))
    assert files == ["vadd_n_1024_sm90.c", "vadd_n_1024_sm90.h", "vadd_n_1024_sm90.json"]
    header = (tmp_path / "vadd_n_1024_sm90.h").read_text()
    source = (tmp_path / "vadd_n_1024_sm90.c").read_text()
    # Typed signature with the stream and grid; n is fixed, so it is no parameter.
    assert (
        "CUresult vadd_n_1024_sm90(CUstream stream, unsigned int grid_x, unsigned int grid_y, "
        "unsigned int grid_z, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out);" in header
    )
    assert '#define VADD_N_1024_SM90_SPECIALIZATION "n=1024"' in header
    assert "fixed at compile time (not parameters below): n = 1024" in header
    assert "#define VADD_N_1024_SM90_BLOCK_X 256" in header
    # The cubin is embedded byte for byte; PTX only when asked.
    assert _c_array(source, "vadd_n_1024_sm90_cubin") == k.cubin
    assert k.cubin[:4] == b"\x7fELF"
    if embed_ptx:
        ptx = _c_array(source, "vadd_n_1024_sm90_ptx")
        assert ptx.rstrip(b"\0").decode() == k.ptx and ".entry vadd__n_1024(" in k.ptx
    else:
        assert "_ptx[" not in source
    # Lazy, once, checked: pthread_once guards the load; every driver call is checked.
    assert "pthread_once(&vadd_n_1024_sm90_once, vadd_n_1024_sm90_init)" in source
    for call in ("cuCtxGetCurrent", "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel"):
        assert f'"{call}"' in source, call
    obj = tmp_path / "k.o"
    _run([cc, *CFLAGS, f"-I{CUDA_INCLUDE}", "-c", str(tmp_path / "vadd_n_1024_sm90.c"), "-o", str(obj)])
    syms = _run(["nm", "--defined-only", str(obj)]).stdout
    for sym in (
        "vadd_n_1024_sm90",
        "vadd_n_1024_sm90_load",
        "vadd_n_1024_sm90_function",
        "vadd_n_1024_sm90_last_error",
    ):
        assert re.search(rf" T {sym}$", syms, re.M), sym
    # The header is usable from C++ too.
    cxx = shutil.which("g++")
    if cxx:
        _run(
            [
                cxx,
                "-std=c++17",
                "-Wall",
                "-Werror",
                "-fsyntax-only",
                f"-I{CUDA_INCLUDE}",
                "-x",
                "c++",
                str(tmp_path / "vadd_n_1024_sm90.h"),
            ]
        )
    # Links against the toolkit's libcuda stub where the toolkit has one.
    if STUBS.is_file():
        _run([cc, "-shared", "-o", str(tmp_path / "k.so"), str(obj), f"-L{STUBS.parent}", "-lcuda"])


def test_aot_json_round_trip(tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path) -> None:
    k = _aot(tilec, kernels, settings, multiple_of={"n": 16}, embed_ptx=True)
    k.write(tmp_path)
    again = tilec.aot.AotKernel.load(tmp_path / f"{k.name}.json")
    assert again == k
    assert again.multiple_of == (("n", 16),) and again.spec_text == "n%16==0"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(tilec.AotError, match="not a tilec AOT description"):
        tilec.aot.AotKernel.load(bad)


# -- the launcher and dispatcher against the fake driver ----------------------------
@pytest.fixture
def full_library(tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path) -> list[Any]:
    return [
        _aot(tilec, kernels, settings),
        _aot(tilec, kernels, settings, constants={"n": 1024}),
        _aot(tilec, kernels, settings, multiple_of={"n": 16}),
    ]


@pytest.mark.parametrize(
    ("n", "entry", "args"),
    [
        (1024, "vadd__n_1024", "1000,2000,3000"),
        (4096, "vadd__n_mul16", "1000,2000,3000,1000"),
        (1000, "vadd", "1000,2000,3000,3e8"),
        (-16, "vadd__n_mul16", "1000,2000,3000,fffffff0"),
    ],
)
def test_dispatcher_picks_the_most_specific(
    tilec: ModuleType,
    full_library: list[Any],
    cc: str,
    fake_cuda: Path,
    tmp_path: Path,
    n: int,
    entry: str,
    args: str,
) -> None:
    exe = _driver(cc, _library(tilec, full_library, tmp_path), fake_cuda)
    out = _drive(exe, fake_cuda, "dispatch", str(n))
    grid = max(1, (n + 255) // 256) if n > 0 else 0
    assert f"fake: launch {entry} grid={grid},1,1 block=256,1,1 shared=0 args={args}\n" in out, out
    assert "rc=0\n" in out and out.count("fake: loaded cubin") == 1
    assert "loads=1 getfn=1 launches=1" in out


def test_dispatcher_fails_clearly_when_nothing_fits(
    tilec: ModuleType, kernels: ModuleType, settings: Any, cc: str, fake_cuda: Path, tmp_path: Path
) -> None:
    lib = [
        _aot(tilec, kernels, settings, constants={"n": 1024}),
        _aot(tilec, kernels, settings, multiple_of={"n": 16}),
    ]
    exe = _driver(cc, _library(tilec, lib, tmp_path), fake_cuda)
    out = _drive(exe, fake_cuda, "dispatch", "1000")
    assert "rc=500\n" in out  # CUDA_ERROR_NOT_FOUND
    assert (
        "error=vadd: no specialization of vadd fits n=1000 (compiled: "
        "vadd_n_1024_sm90 [n == 1024]; vadd_n_mul16_sm90 [n % 16 == 0])"
    ) in out
    assert "loads=0 getfn=0 launches=0" in out  # nothing reached the driver


def test_module_loads_once_across_threads(
    tilec: ModuleType, full_library: list[Any], cc: str, fake_cuda: Path, tmp_path: Path
) -> None:
    exe = _driver(cc, _library(tilec, full_library, tmp_path), fake_cuda)
    out = _drive(exe, fake_cuda, "threads", "16")
    assert out.count("rc=0\n") == 16
    assert "loads=1 getfn=1 launches=16" in out


@pytest.mark.parametrize(
    ("env", "rc", "message", "counts"),
    [
        (
            {"FAKE_CUDA_FAIL": "cuModuleLoadData"},
            200,
            "error=vadd_n_1024_sm90: loading the sm_90 cubin: cuModuleLoadData failed: "
            "CUDA_ERROR_INVALID_IMAGE (200): fake description",
            "loads=1 getfn=0 launches=0",  # tried once, the error is remembered
        ),
        (
            {"FAKE_CUDA_FAIL": "cuModuleGetFunction"},
            500,
            "error=vadd_n_1024_sm90: loading: cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND (500)",
            "loads=1 getfn=1 launches=0",
        ),
        (
            {"FAKE_CUDA_FAIL": "cuLaunchKernel"},
            719,
            "error=vadd_n_1024_sm90: cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED (719)",
            "loads=1 getfn=1 launches=2",
        ),
        (
            {"FAKE_CUDA_NO_CONTEXT": "1"},
            201,
            "error=vadd_n_1024_sm90: loading: no current CUDA context on this thread",
            "loads=0 getfn=0 launches=0",
        ),
        (
            {"FAKE_CUDA_REJECT_CUBIN": "1"},
            209,
            "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209)",
            "loads=1 getfn=0 launches=0",
        ),
    ],
)
def test_every_driver_call_is_checked(
    tilec: ModuleType,
    full_library: list[Any],
    cc: str,
    fake_cuda: Path,
    tmp_path: Path,
    env: dict[str, str],
    rc: int,
    message: str,
    counts: str,
) -> None:
    exe = _driver(cc, _library(tilec, full_library, tmp_path), fake_cuda)
    out = _drive(exe, fake_cuda, "twice", "1024", **env)
    assert out.count(f"rc={rc}\n") == 2, out
    assert out.count(message) == 2, out
    assert counts in out, out


def test_ptx_fallback_when_the_cubin_is_refused(
    tilec: ModuleType, kernels: ModuleType, settings: Any, cc: str, fake_cuda: Path, tmp_path: Path
) -> None:
    lib = [_aot(tilec, kernels, settings, embed_ptx=True)]
    exe = _driver(cc, _library(tilec, lib, tmp_path), fake_cuda)
    out = _drive(exe, fake_cuda, "dispatch", "1000", FAKE_CUDA_REJECT_CUBIN="1")
    assert "fake: loaded ptx" in out and "rc=0\n" in out
    assert "loads=2 getfn=1 launches=1" in out  # the cubin, then the PTX


@pytest.mark.parametrize(("device", "size_of"), [("90", "sm_90"), ("86", "sm_80"), ("80", "sm_80"), ("75", None)])
def test_dispatch_by_device_arch(
    tilec: ModuleType,
    kernels: ModuleType,
    settings: Any,
    cc: str,
    fake_cuda: Path,
    tmp_path: Path,
    device: str,
    size_of: str | None,
) -> None:
    k90 = _aot(tilec, kernels, settings, target="cuda:90")
    k80 = _aot(tilec, kernels, settings, target="cuda:80")
    assert len(k90.cubin) != len(k80.cubin)
    exe = _driver(cc, _library(tilec, [k80, k90], tmp_path), fake_cuda)
    out = _drive(exe, fake_cuda, "dispatch", "1000", FAKE_CUDA_CC=device)
    if size_of is None:
        assert "rc=500\n" in out
        assert "error=vadd: no specialization of vadd fits device sm_75" in out
    else:
        size = len(k90.cubin) if size_of == "sm_90" else len(k80.cubin)
        assert f"fake: loaded cubin {size} bytes" in out and "rc=0\n" in out


def test_link_refuses_inconsistent_libraries(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    base = _aot(tilec, kernels, settings)
    with pytest.raises(tilec.AotError, match="both named 'vadd_sm90'"):
        tilec.aot.link([base, base], "lib")
    with pytest.raises(tilec.AotError, match="must share block"):
        tilec.aot.link([base, _aot(tilec, kernels, settings, block=128, constants={"n": 8})], "lib")
    other = _aot(tilec, kernels, settings, name="vadd_again")
    with pytest.raises(tilec.AotError, match="are the same specialization"):
        tilec.aot.link([base, other], "lib")
    with pytest.raises(tilec.AotError, match="is taken"):
        tilec.aot.link([_aot(tilec, kernels, settings, name="vadd")], "lib")
    exp = tilec.aot.compile(kernels.EXP_IR, "cuda:90", settings=settings, name="vadd_other")
    renamed = tilec.aot.AotKernel.from_json({**exp.to_json(), "kernel": "vadd"})
    with pytest.raises(tilec.AotError, match="disagree on its parameters"):
        tilec.aot.link([base, renamed], "lib")
    with pytest.raises(tilec.AotError, match="C identifier"):
        tilec.aot.link([base], "my-lib")


def test_aot_needs_a_cubin_backend_and_ptxas(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path
) -> None:
    no_ptxas = tilec.compile(_vadd(tilec, kernels), "sm_90", use_ptxas=False, settings=settings)
    with pytest.raises(tilec.AotError, match="needs the cubin"):
        tilec.aot.from_kernel(no_ptxas)
    with pytest.raises(tilec.AotError, match="C identifier"):
        _aot(tilec, kernels, settings, name="bad name")


# -- specialization in the IR ------------------------------------------------------------
def test_specialization_is_compiled_in(tilec: ModuleType, kernels: ModuleType, settings: Any) -> None:
    k = tilec.compile(_vadd(tilec, kernels), "cuda:90", constants={"n": 1024}, settings=settings)
    assert k.name == "vadd__n_1024"
    assert str(k.signature).count("ptr addrspace(1)") == 3 and "i32" not in str(k.signature)
    assert re.search(
        r"\.visible \.entry vadd__n_1024\(\s*\.param \.u64 \w+,\s*\.param \.u64 \w+,"
        r"\s*\.param \.u64 \w+\s*\)",
        k.asm["ptx"],
    )
    assert "1023" in k.asm["ptx"]  # i < 1024 folded into the compare
    assert k.metadata.param_names == ("a", "b", "out")
    assert k.metadata.specialization == {"constants": {"n": 1024}, "multiple_of": {}}
    m = tilec.compile(_vadd(tilec, kernels), "cuda:90", multiple_of={3: 16}, settings=settings)
    assert m.name == "vadd__n_mul16" and "llvm.assume" in m.asm["llir"]
    f = tilec.compile(kernels.EXP_IR, "sm_90", constants={"scale": 2.5}, settings=settings)
    assert f.name == "exp_scale__scale_2p5" and "0f40200000" in f.asm["ptx"]  # 2.5f
    with pytest.raises(tilec.CompileError, match=r"no parameter 'm'.*a \(ptr addrspace\(1\)\)"):
        tilec.compile(_vadd(tilec, kernels), constants={"m": 1}, settings=settings)
    with pytest.raises(tilec.CompileError, match="only integer and floating-point"):
        tilec.compile(_vadd(tilec, kernels), constants={"a": 1}, settings=settings)
    with pytest.raises(tilec.CompileError, match="does not fit i32"):
        tilec.compile(_vadd(tilec, kernels), constants={"n": 2**32}, settings=settings)
    with pytest.raises(tilec.CompileError, match="k > 1"):
        tilec.compile(_vadd(tilec, kernels), multiple_of={"n": 0}, settings=settings)
    with pytest.raises(tilec.CompileError, match="not a finite float"):
        tilec.compile(kernels.EXP_IR, constants={"scale": 1e39}, settings=settings)


# -- the command line --------------------------------------------------------------------
def _tilec_cli(
    tilec: ModuleType, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    root = Path(tilec.__file__).resolve().parent.parent
    full = dict(os.environ, PYTHONPATH=str(root), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "tilec", *args], capture_output=True, text=True, cwd=cwd, env=full, check=False
    )


def test_cli_aot_and_aot_link(
    tilec: ModuleType,
    kernels: ModuleType,
    settings: Any,
    cc: str,
    fake_cuda: Path,
    tmp_path: Path,
) -> None:
    src = tmp_path / "vadd.ll"
    src.write_text(tilec.ir.to_text(_vadd(tilec, kernels)))
    env = {"TILEC_CACHE_DIR": str(settings.cache_dir), "TILEC_PTXAS": str(settings.ptxas)}
    for extra in ([], ["-C", "n=1024"], ["-M", "n=16", "--embed-ptx"]):
        proc = _tilec_cli(
            tilec,
            "aot",
            str(src),
            "--target",
            "cuda:90",
            "--block",
            "256",
            "-o",
            "specs",
            *extra,
            cwd=tmp_path,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
    specs = sorted((tmp_path / "specs").glob("*.json"))
    assert [p.name for p in specs] == ["vadd_n_1024_sm90.json", "vadd_n_mul16_sm90.json", "vadd_sm90.json"]
    proc = _tilec_cli(tilec, "aot-link", *map(str, specs), "--name", "vaddlib", "-o", "lib", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "vadd: vadd_n_1024_sm90, vadd_n_mul16_sm90, vadd_sm90" in proc.stdout
    exe = _driver(cc, tmp_path / "lib", fake_cuda)
    assert "fake: launch vadd__n_mul16 " in _drive(exe, fake_cuda, "dispatch", "32")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["aot", "{src}", "--target", "cuda:999"], "unknown target 'cuda:999'"),
        (["aot", "{src}", "--target", "tpu:1"], "no backend named 'tpu'"),
        (["aot", "{src}", "-C", "nope=1"], "has no parameter 'nope'"),
        (["aot", "{src}", "-C", "n"], "--constant takes NAME=VALUE"),
        (["aot", "missing.ll"], "cannot read missing.ll"),
        (["aot-link", "nothing.json", "--name", "x"], "cannot read AOT description nothing.json"),
    ],
)
def test_cli_errors_are_one_message(
    tilec: ModuleType, kernels: ModuleType, settings: Any, tmp_path: Path, args: list[str], message: str
) -> None:
    src = tmp_path / "vadd.ll"
    src.write_text(tilec.ir.to_text(_vadd(tilec, kernels)))
    env = {"TILEC_CACHE_DIR": str(settings.cache_dir), "TILEC_PTXAS": str(settings.ptxas)}
    proc = _tilec_cli(tilec, *[a.format(src=src) for a in args], cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
