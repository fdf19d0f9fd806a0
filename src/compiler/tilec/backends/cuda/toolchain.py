"""Locate ptxas and libdevice: explicit settings first, then the CUDA toolkit, then the wheels."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...cache.format import file_state, unchanged
from ...errors import ToolNotFoundError
from ...settings import Settings
from . import nvptxcompiler

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


def _remembered(find: Callable[[Settings], Path | None]) -> Callable[[Settings], Path | None]:
    """Remember `find`'s answer per Settings (searching PATH and the wheels costs more than
    a cache hit should); an answer whose file has gone is searched for again."""
    found: dict[Settings, Path] = {}

    @functools.wraps(find)
    def wrapper(settings: Settings) -> Path | None:
        path = found.get(settings)
        if path is not None and path.is_file():
            return path
        path = find(settings)
        if path is not None:
            found[settings] = path
        return path

    return wrapper


@_remembered
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
    path = _find_libdevice(settings)
    assert path is not None
    return path


@_remembered
def _find_libdevice(settings: Settings) -> Path | None:
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


def memo_dir(settings: Settings) -> Path:
    """Where facts about tool files (ptxas's version, libdevice's and the PTX compiler library's
    sha256) are remembered across processes, and the library's shim is linked: beside the kernel
    cache, whether or not that is on. TILEC_CACHE=0 keeps no compiled kernels; these are facts of
    the machine's tools, kept so that hashing the library and linking its shim happen once per
    file, not again in every cache-off process."""
    return settings.cache_dir / "tools"


def _file_memo(kind: str, path: Path, memo: Path | None, compute: Callable[[], str]) -> str:
    """`compute()` for this file, remembered on disk under `memo` keyed by the file's
    (path, mtime, size), so that a new process need not run or read the tool again.
    In the process it is remembered whatever `memo` is: the file decides the answer, the
    memo directory (the cache's) only where it is kept, and a compile into a new cache
    directory must not run `ptxas --version` again."""
    st = path.stat()
    key = (kind, str(path), st.st_mtime_ns, st.st_size)
    value = _MEMO.get(key)
    if value is None:
        value = _MEMO[key] = _file_memo_disk(key, memo, compute)
    elif memo is not None and (key, memo) not in _KEPT:
        # Known here, not yet kept in this memo directory: write it down once, so that
        # another process using this cache finds it.
        entry, ident = _memo_entry(memo, key)
        _remember(entry, {"id": ident, "v": value})
    if memo is not None:
        _KEPT.add((key, memo))
    return value


_MEMO: dict[tuple[str, str, int, int], str] = {}
# (what, memo directory) pairs this process has read from or written to that directory.
_KEPT: set[tuple[Any, Path]] = set()


def _memo_entry(memo: Path, key: tuple[str, str, int, int]) -> tuple[Path, str]:
    """The memo file of `key` under `memo`, and the id the file records."""
    ident = json.dumps(list(key))
    return memo / f"{key[0]}-{hashlib.sha256(ident.encode()).hexdigest()[:32]}.json", ident


def _file_memo_disk(
    key: tuple[str, str, int, int], memo: Path | None, compute: Callable[[], str]
) -> str:
    if memo is None:
        return compute()
    entry, ident = _memo_entry(memo, key)
    try:
        data = json.loads(entry.read_bytes())
        if isinstance(data, dict) and data.get("id") == ident and isinstance(data.get("v"), str):
            return str(data["v"])
    except (OSError, ValueError):
        pass
    value = compute()
    _remember(entry, {"id": ident, "v": value})
    return value


def _remember(entry: Path, data: object) -> None:
    """Write a memo file whole or not at all (a temp file moved into place); a memo that cannot be
    written is only a slower next run, so OSError is not an error here."""
    with contextlib.suppress(OSError):
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=f".{entry.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, entry)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _ptxas_version(path: Path) -> str:
    proc = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    match = re.search(r"V(\d+\.\d+\.\d+)", proc.stdout)
    return match.group(1) if match else "unknown"


def ptxas_info(path: Path, memo: Path | None = None) -> Ptxas:
    """ptxas at `path` and its version; with `memo` (see memo_dir) the version is
    remembered on disk, so `ptxas --version` runs once per ptxas file, not per process."""
    return Ptxas(path, _file_memo("ptxas-version", path, memo, lambda: _ptxas_version(path)))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_sha256(path: Path, memo: Path | None = None) -> str:
    """sha256 of a file, remembered while its mtime and size stay the same (on disk too,
    with `memo`)."""
    return _file_memo("sha256", path, memo, functools.partial(_sha256, path))


# -- the tools' identity, for cache keys -------------------------------------------------
# A fresh process that hits the cache must not run `ptxas --version`, hash libdevice or
# search PATH and the CUDA homes again: the answer is remembered in one small file per
# search inputs, and trusted while nothing it depends on changed. That is: the two files
# found (path, mtime, size) and the directories the search looked in (mtime: a tool put
# into one of them changes it). An answer with a tool missing is not written down, since
# then the nvidia-* wheels in site-packages, which are not watched, would also count.

# Loaded records, per search inputs rather than per Settings: another cache directory (or
# any other setting) finds the same tools, and must not run `ptxas --version` again.
_IDENTITY: dict[tuple[str, ...], dict[str, Any]] = {}


def _before(dirs: list[Path], found: Path | None) -> list[Path]:
    """The directories searched before the one `found` is in: a tool put into one of them
    would be found instead (all of them when nothing was found)."""
    if found is None:
        return dirs
    out: list[Path] = []
    for d in dirs:
        if d == found.parent:
            break
        out.append(d)
    return out


def _watched_dirs(settings: Settings, ptxas: Path | None, libdevice: Path | None) -> list[str]:
    """find_ptxas's and find_libdevice's search directories, in their order, up to what they
    found (an explicit TILEC_PTXAS / TILEC_LIBDEVICE searches nothing)."""
    dirs: list[Path] = []
    if settings.ptxas is None:
        ptxas_dirs = [settings.cuda_home / "bin"] if settings.cuda_home is not None else []
        ptxas_dirs += [Path(d) for d in settings.path.split(os.pathsep) if d]
        ptxas_dirs += [h / "bin" for h in _cuda_homes(settings)]
        dirs += _before(ptxas_dirs, ptxas)
    if settings.libdevice is None:
        lib_dirs = [h / "nvvm" / "libdevice" for h in _cuda_homes(settings)]
        if ptxas is not None:
            lib_dirs.append(ptxas.parent.parent / "nvvm" / "libdevice")
        dirs += _before(lib_dirs, libdevice)
    return list(dict.fromkeys(str(d) for d in dirs))


def _compute_identity(settings: Settings, memo: Path) -> dict[str, Any]:
    ptxas_path = find_ptxas(settings)
    ptxas = ptxas_info(ptxas_path, memo) if ptxas_path is not None else None
    try:
        libdevice_path: Path | None = find_libdevice(settings)
    except ToolNotFoundError:
        libdevice_path = None
    libdevice = file_sha256(libdevice_path, memo) if libdevice_path is not None else None
    watch = [str(p) for p in (settings.ptxas, settings.libdevice, ptxas_path, libdevice_path) if p]
    watch += _watched_dirs(settings, ptxas_path, libdevice_path)
    archive, ptxc = _nvptxcompiler(settings, memo)
    # The archives looked for before the one found (all where none was): one put there later
    # would be found instead. Absent files are watched as absent.
    for cand in nvptxcompiler.candidates(settings):
        watch.append(str(cand))
        if cand == archive:
            break
    return {
        "format": 2,
        "ptxas": [str(ptxas.path), ptxas.version] if ptxas is not None else None,
        "libdevice": libdevice,
        "libdevice_path": str(libdevice_path) if libdevice_path is not None else None,
        "nvptxcompiler": ptxc,
        "watch": [[w, file_state(w)] for w in dict.fromkeys(watch)],
    }


def _nvptxcompiler(settings: Settings, memo: Path) -> tuple[Path | None, list[str] | None]:
    """The nvPTXCompiler archive found and [path, release, sha256] of it (both None for none)."""
    try:
        archive = nvptxcompiler.find(settings)
    except ToolNotFoundError:  # TILEC_NVPTXCOMPILER naming nothing: said when it is used
        return None, None
    if archive is None:
        return None, None
    found = archive

    def describe() -> str:
        return " ".join(nvptxcompiler.describe(found))

    version, sha256 = _file_memo("nvptxcompiler", archive, memo, describe).split(" ")
    return archive, [str(archive), version, sha256]


def identity(settings: Settings) -> dict[str, Any]:
    """{"ptxas": [path, version] or None, "libdevice": sha256 or None, ...}: what the cuda
    backend's cache keys hold of its tools. Remembered in `<cache>/tools/cuda-<digest>.json`
    (see above), so that a cache hit spawns no process and reads one small file."""
    inputs = [str(settings.ptxas), str(settings.libdevice), str(settings.cuda_home), settings.path]
    inputs.append(str(settings.nvptxcompiler))
    remembered = tuple(inputs)
    record = _IDENTITY.get(remembered)
    memo = memo_dir(settings)
    if record is not None and unchanged(record["watch"]):
        if (remembered, memo) not in _KEPT:
            # Found for another cache directory: keep it in this one's memo too, once, so
            # that a fresh process hitting this cache need not search and run ptxas.
            _KEPT.add((remembered, memo))
            _remember(_identity_entry(memo, inputs), record)
        return record
    entry = _identity_entry(memo, inputs)
    try:
        loaded = json.loads(entry.read_bytes())
        same = loaded.get("format") == 2 and loaded.get("inputs") == inputs
        if same and unchanged(loaded["watch"]):
            _IDENTITY[remembered] = loaded
            _KEPT.add((remembered, memo))
            return loaded  # type: ignore[no-any-return]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    record = {**_compute_identity(settings, memo), "inputs": inputs}
    if record["ptxas"] is None or record["libdevice"] is None:
        return record  # searched again next time, as a tool may be installed meanwhile
    _IDENTITY[remembered] = record
    _remember(entry, record)
    _KEPT.add((remembered, memo))
    return record


def _identity_entry(memo: Path, inputs: list[str]) -> Path:
    return memo / f"cuda-{hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:32]}.json"
