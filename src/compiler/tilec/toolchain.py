"""Locate ptxas and libdevice: explicit settings first, then the CUDA toolkit, then the wheels."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolNotFoundError
from .settings import Settings

LIBDEVICE_NAME = "libdevice.10.bc"


def _nvidia_wheel_roots() -> list[Path]:
    """Roots of the nvidia-* wheels (nvidia-cuda-nvcc, nvidia-nvvm, ...) if installed."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    roots: list[Path] = []
    for loc in spec.submodule_search_locations:
        base = Path(loc)
        roots += [base / "cuda_nvcc", base / "nvvm", base / "cu13", base / "cu12", base]
    return [r for r in roots if r.is_dir()]


def _cuda_homes(settings: Settings) -> list[Path]:
    homes = [settings.cuda_home] if settings.cuda_home else []
    homes.append(Path("/usr/local/cuda"))
    return [h for h in homes if h is not None]


def find_ptxas(settings: Settings) -> Path | None:
    """TILEC_PTXAS, then $CUDA_HOME/bin, then PATH, then /usr/local/cuda, then nvidia wheels."""
    if settings.ptxas is not None:
        if not (settings.ptxas.is_file() and os.access(settings.ptxas, os.X_OK)):
            raise ToolNotFoundError(
                f"TILEC_PTXAS={settings.ptxas} is not an executable file; "
                "fix the path or unset TILEC_PTXAS"
            )
        return settings.ptxas
    if settings.cuda_home is not None:
        cand = settings.cuda_home / "bin" / "ptxas"
        if cand.is_file():
            return cand
    found = shutil.which("ptxas", path=settings.path)
    if found:
        return Path(found)
    candidates = [h / "bin" / "ptxas" for h in _cuda_homes(settings)]
    candidates += [r / "bin" / "ptxas" for r in _nvidia_wheel_roots()]
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def find_cuda_tool(settings: Settings, name: str) -> Path | None:
    """A CUDA binary tool (nvdisasm, cuobjdump): $CUDA_HOME/bin, PATH, beside ptxas,
    /usr/local/cuda/bin, the nvidia-* wheels."""
    env_override = {"nvdisasm": settings.nvdisasm, "cuobjdump": settings.cuobjdump}.get(name)
    if env_override is not None:
        return env_override if env_override.is_file() else None
    candidates: list[Path] = []
    if settings.cuda_home is not None:
        candidates.append(settings.cuda_home / "bin" / name)
    found = shutil.which(name, path=settings.path)
    if found:
        candidates.append(Path(found))
    try:
        ptxas = find_ptxas(settings)
    except ToolNotFoundError:
        ptxas = None
    if ptxas is not None:
        candidates.append(ptxas.parent / name)
    candidates += [h / "bin" / name for h in _cuda_homes(settings)]
    candidates += [r / "bin" / name for r in _nvidia_wheel_roots()]
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def find_libdevice(settings: Settings) -> Path:
    """TILEC_LIBDEVICE, then <cuda>/nvvm/libdevice, then the nvidia wheels."""
    if settings.libdevice is not None:
        if not settings.libdevice.is_file():
            raise ToolNotFoundError(
                f"TILEC_LIBDEVICE={settings.libdevice} does not exist; "
                "fix the path or unset TILEC_LIBDEVICE"
            )
        return settings.libdevice
    candidates = [h / "nvvm" / "libdevice" / LIBDEVICE_NAME for h in _cuda_homes(settings)]
    ptxas = find_ptxas(settings)
    if ptxas is not None:
        candidates.append(ptxas.parent.parent / "nvvm" / "libdevice" / LIBDEVICE_NAME)
    for root in _nvidia_wheel_roots():
        candidates += [
            root / "nvvm" / "libdevice" / LIBDEVICE_NAME,
            root / "libdevice" / LIBDEVICE_NAME,
        ]
    for cand in candidates:
        if cand.is_file():
            return cand
    searched = "\n  ".join(str(c) for c in candidates)
    raise ToolNotFoundError(
        f"the module calls __nv_* functions but {LIBDEVICE_NAME} was not found; searched:\n  "
        f"{searched}\nset TILEC_LIBDEVICE, CUDA_HOME, or install nvidia-cuda-nvcc"
    )


@dataclass(frozen=True)
class Ptxas:
    path: Path
    version: str  # e.g. "13.0.88"

    @property
    def max_sm(self) -> int:
        major = int(self.version.split(".")[0]) if self.version else 0
        return 120 if major >= 12 else 90


@functools.cache
def ptxas_info(path: Path) -> Ptxas:
    proc = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    match = re.search(r"V(\d+\.\d+\.\d+)", proc.stdout)
    return Ptxas(path, match.group(1) if match else "unknown")


@functools.cache
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file, remembered while its mtime and size stay the same."""
    st = path.stat()
    return _file_sha256(str(path), st.st_mtime_ns, st.st_size)
