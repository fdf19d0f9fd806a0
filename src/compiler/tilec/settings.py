"""The only place tilec reads the environment: parsed once into a frozen dataclass."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Settings:
    cache_enabled: bool
    cache_dir: Path
    ptxas: Path | None
    libdevice: Path | None
    cuda_home: Path | None
    path: str
    debug_dump_dir: Path | None
    dump_passes: bool = False  # TILEC_DUMP_PASSES: also the IR after every LLVM pass
    plugin_dirs: tuple[Path, ...] = ()  # TILEC_PLUGIN_DIRS, os.pathsep-separated
    nvdisasm: Path | None = None  # TILEC_NVDISASM
    cuobjdump: Path | None = None  # TILEC_CUOBJDUMP
    native_launch: bool = True  # TILEC_NATIVE_LAUNCH=0: pack and launch in Python instead
    # TILEC_ASSEMBLER: the cuda backend's PTX -> cubin when the `assembler` option is not given
    # ("auto", "ptxas", "nvptxcompiler", "nvjitlink")
    assembler: str = "auto"
    nvptxcompiler: Path | None = None  # TILEC_NVPTXCOMPILER: the library's archive or prefix
    cxx: Path | None = None  # TILEC_CXX: the C++ compiler that links the nvPTXCompiler shim
    # TILEC_ASSEMBLER_CHECK=1: auto's nvPTXCompiler cubins compared with ptxas's (twice the cost)
    assembler_check: bool = False
    # TILEC_HEAP_PAD_MIB: freed heap glibc keeps for the next in-process assembly (cuda/heap.py)
    heap_pad_mib: str = ""
    malloc_tuned: bool = False  # the environment sets glibc's top pad or trim threshold itself

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def opt_path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value).expanduser() if value else None

        cache_dir = opt_path("TILEC_CACHE_DIR")
        if cache_dir is None:
            xdg = env.get("XDG_CACHE_HOME", "").strip()
            base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
            cache_dir = base / "tilec"
        cuda_home = opt_path("CUDA_HOME") or opt_path("CUDA_PATH")
        return cls(
            cache_enabled=env.get("TILEC_CACHE", "1").strip().lower() not in _FALSE,
            cache_dir=cache_dir,
            ptxas=opt_path("TILEC_PTXAS"),
            libdevice=opt_path("TILEC_LIBDEVICE"),
            cuda_home=cuda_home,
            path=env.get("PATH", ""),
            debug_dump_dir=opt_path("TILEC_DUMP_DIR"),
            dump_passes=env.get("TILEC_DUMP_PASSES", "0").strip().lower() not in _FALSE,
            nvdisasm=opt_path("TILEC_NVDISASM"),
            cuobjdump=opt_path("TILEC_CUOBJDUMP"),
            native_launch=env.get("TILEC_NATIVE_LAUNCH", "1").strip().lower() not in _FALSE,
            assembler=env.get("TILEC_ASSEMBLER", "").strip().lower() or "auto",
            nvptxcompiler=opt_path("TILEC_NVPTXCOMPILER"),
            cxx=opt_path("TILEC_CXX"),
            assembler_check=env.get("TILEC_ASSEMBLER_CHECK", "0").strip().lower() not in _FALSE,
            heap_pad_mib=env.get("TILEC_HEAP_PAD_MIB", ""),
            malloc_tuned=_malloc_tuned(env),
            plugin_dirs=tuple(
                Path(p).expanduser()
                for p in env.get("TILEC_PLUGIN_DIRS", "").split(os.pathsep)
                if p.strip()
            ),
        )


def _malloc_tuned(env: Mapping[str, str]) -> bool:
    """Whether the environment sets glibc's top pad or trim threshold (tilec then leaves them)."""
    if any(env.get(k, "").strip() for k in ("MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_")):
        return True
    tunables = env.get("GLIBC_TUNABLES", "")
    return "glibc.malloc.top_pad" in tunables or "glibc.malloc.trim_threshold" in tunables
