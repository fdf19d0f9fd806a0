from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.native

# A C++ extension with LLVM linked in statically needs the C++ runtime and libc
# from the system, and nothing else beyond the toolchain's support libraries.
REQUIRED = {"libc.so.6"}
SUPPORT = {"libm.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2", "librt.so.1"}
# Never: a shared LLVM, Python (the interpreter provides it), the CUDA driver or
# toolkit libraries (compiling needs no GPU), or LLVM's optional host deps.
FORBIDDEN = re.compile(r"LLVM|python|cuda|nvrtc|nvJitLink|nvidia|tinfo|ncurses|xml2|edit|z3|ffi", re.I)


def _core_path(tilec: ModuleType) -> Path:
    return Path(tilec.native.core().__file__)


def _llvm_config_flag(name: str) -> bool:
    import os

    prefix = Path(os.environ.get("HERMETIC_TEST_LLVM_PREFIX", "/usr/lib/llvm-19"))
    text = (prefix / "lib/cmake/llvm/LLVMConfig.cmake").read_text()
    m = re.search(rf"set\({name} (\S+)\)", text)
    return bool(m) and m.group(1).upper() not in ("0", "OFF", "FALSE", "NO", "")


def test_needed_only_system_libraries(tilec: ModuleType) -> None:
    out = subprocess.run(
        ["readelf", "-d", str(_core_path(tilec))], capture_output=True, text=True, check=True
    ).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    assert REQUIRED <= needed, f"missing {sorted(REQUIRED - needed)} in NEEDED: {sorted(needed)}"
    # The C++ runtime: the machine's libstdc++ (a build with the host compiler), or no shared one at
    # all where it is linked in statically (zig's libc++, the manylinux wheel); never a shared libc++.
    cxx = needed & {"libstdc++.so.6", "libc++.so.1", "libc++abi.so.1"}
    assert cxx in (set(), {"libstdc++.so.6"}), f"C++ runtime in NEEDED: {sorted(needed)}"
    allowed = REQUIRED | SUPPORT | {"libstdc++.so.6"}
    # Debian's llvm-19-dev links compression into LLVMSupport; our own slim
    # variants are built without it, and then these must not appear.
    if _llvm_config_flag("LLVM_ENABLE_ZLIB"):
        allowed.add("libz.so.1")
    if _llvm_config_flag("LLVM_ENABLE_ZSTD"):
        allowed.add("libzstd.so.1")
    unexpected = {n for n in needed - allowed if not re.fullmatch(r"ld-linux[-\w.]*\.so\.\d+", n)}
    assert not unexpected, f"NEEDED entries beyond the system's C/C++ runtime: {sorted(unexpected)}"
    assert not [n for n in needed if FORBIDDEN.search(n)], sorted(needed)
    # Nothing points the loader at the build machine's directories.
    assert "(RPATH)" not in out and "(RUNPATH)" not in out, out


def test_only_the_module_init_is_exported(tilec: ModuleType) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(_core_path(tilec))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    text_syms = [line.split()[-1] for line in out.splitlines() if " T " in line]
    assert text_syms == ["PyInit__core"], text_syms
    assert "llvm" not in out.lower().replace("tilec", "")


def test_versions_and_targets(tilec: ModuleType) -> None:
    assert tilec.llvm_version().startswith("19.")
    targets = tilec.registered_targets()
    assert "nvptx64" in targets
    import os

    if os.environ.get("HERMETIC_TEST_TILEC_X86", "ON") == "ON":
        assert "x86-64" in targets  # the CPU example backend lowers through it
        assert tilec.native.host_cpu() in tilec.native.target_info("x86_64-unknown-linux-gnu").processors
    info = tilec.native.target_info()
    assert {"sm_80", "sm_90", "sm_90a"} <= set(info.processors)
    assert 78 in info.ptx_versions and 80 in info.ptx_versions
