"""PTX -> cubin in process with NVIDIA's PTX compiler library, linked here against the user's copy.

The `assembler="nvptxcompiler"` option of the cuda backend (and what `auto` picks where it can).
The library (`libnvptxcompiler_static.a` and `nvPTXCompiler.h`: PyPI's `nvidia-nvptxcompiler`, or a
CUDA toolkit's lib64/ and include/) gives ptxas's exact code in process, but exists only as a
static archive of C++ built against libstdc++, and tilec redistributes nothing of NVIDIA's. So
tilec links it on the user's machine, once per library file: `nvptxcompiler_shim.c` (shipped as
source) is linked with the machine's g++ into a small shared object, statically with libstdc++ and
exporting only the shim's three C functions, kept under `<cache>/tools/` by the library's sha256
and loaded with ctypes. Only plain C values cross that boundary, so the library's libstdc++ and
the core's libc++ (the pinned zig toolchain) never meet. A build takes about a second.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import PtxasError, TargetError, ToolError, ToolNotFoundError
from ...settings import Settings
from . import arch as sm

if TYPE_CHECKING:
    import ctypes

ARCHIVE = "libnvptxcompiler_static.a"
HEADER = "nvPTXCompiler.h"
SHIM = Path(__file__).with_name("nvptxcompiler_shim.c")
INSTALL = "pip install nvidia-nvptxcompiler (or set TILEC_NVPTXCOMPILER to a CUDA toolkit's lib64)"
_VERSION = re.compile(rb"Cuda compilation tools, release \d+\.\d+, V(\d+\.\d+\.\d+)")
_EXPORTS = "{ global: tilec_nvptxc_*; local: *; };\n"


@dataclass(frozen=True)
class Library:
    archive: Path
    include: Path  # the directory holding nvPTXCompiler.h
    version: str  # the release it was built from, e.g. "13.0.88"
    sha256: str


def candidates(settings: Settings) -> list[Path]:
    """Where the archive is looked for, in order: TILEC_NVPTXCOMPILER (the archive, or a prefix with
    lib64/ or lib/), $CUDA_HOME and /usr/local/cuda, then the nvidia-* wheels (cu13, cu12)."""
    if settings.nvptxcompiler is not None:
        given = settings.nvptxcompiler
        if given.name == ARCHIVE or given.is_file():
            return [given]
        return [given / "lib64" / ARCHIVE, given / "lib" / ARCHIVE, given / ARCHIVE]
    homes = [settings.cuda_home] if settings.cuda_home is not None else []
    homes.append(Path("/usr/local/cuda"))
    dirs = [h / sub for h in homes for sub in ("lib64", "lib")]
    for root in _wheel_roots():
        dirs += [root / "cu13" / "lib", root / "cu12" / "lib"]
    # One path per directory (lib64 is often a link to lib): each is watched by cache hits.
    return [Path(d) / ARCHIVE for d in dict.fromkeys(os.path.realpath(d) for d in dirs)]


def _wheel_roots() -> list[Path]:
    """The `nvidia` namespace directories, found or not yet there: every site directory on
    sys.path may receive one when `nvidia-nvptxcompiler` is installed."""
    import sys

    roots = [Path(p) / "nvidia" for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    with contextlib.suppress(ImportError, ValueError, AttributeError):
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        if spec is not None and spec.submodule_search_locations:
            roots += [Path(p) for p in spec.submodule_search_locations]
    return list(dict.fromkeys(roots))


def find(settings: Settings) -> Path | None:
    """The archive that `candidates` finds first; TILEC_NVPTXCOMPILER naming none is an error."""
    for path in candidates(settings):
        if path.is_file() and (path.parent.parent / "include" / HEADER).is_file():
            return path
    if settings.nvptxcompiler is not None:
        raise ToolNotFoundError(
            f"TILEC_NVPTXCOMPILER={settings.nvptxcompiler} holds no {ARCHIVE} with "
            f"include/{HEADER} beside its directory; fix the path or unset TILEC_NVPTXCOMPILER"
        )
    return None


def describe(archive: Path) -> tuple[str, str]:
    """(release, sha256) of the archive, read in one pass ("unknown" where it names none)."""
    digest = hashlib.sha256()
    version = "unknown"
    tail = b""
    with archive.open("rb") as f:
        for block in iter(functools.partial(f.read, 1 << 22), b""):
            digest.update(block)
            if version == "unknown":
                m = _VERSION.search(tail + block)
                if m:
                    version = m.group(1).decode()
            tail = block[-128:]
    return version, digest.hexdigest()


def library(archive: Path, version: str, sha256: str) -> Library:
    return Library(archive, archive.parent.parent / "include", version, sha256)


# -- the shim: built once per library file, loaded once per process ----------------------------


def find_cxx(settings: Settings) -> Path | None:
    """TILEC_CXX, else g++ or c++ on PATH or in /usr/bin, else cc or gcc: the archives of CUDA
    13.0 need no libstdc++ (only glibc's __cxa_atexit) and link with a C compiler too; 13.5's do
    need it (the failed link then says to install g++)."""
    if settings.cxx is not None:
        return settings.cxx if settings.cxx.is_file() else None
    for name in ("g++", "c++", "cc", "gcc"):
        found = shutil.which(name, path=settings.path) or shutil.which(name, path="/usr/bin")
        if found:
            return Path(found)
    return None


def shim_path(lib: Library, tools: Path) -> Path:
    """Where the shim built for `lib` is kept: named by the library's and the shim's digests."""
    ident = hashlib.sha256(lib.sha256.encode() + SHIM.read_bytes() + _EXPORTS.encode()).hexdigest()
    return tools / f"nvptxcompiler-{lib.version}-{ident[:24]}.so"


def build_command(cxx: Path, lib: Library, exports: Path, out: Path) -> list[str]:
    # -static-libstdc++/-static-libgcc: the archive's C++ runtime goes inside the shim;
    # --exclude-libs and the version script: none of its symbols (or NVIDIA's) are exported.
    return [
        str(cxx), "-shared", "-fPIC", "-O2", "-fvisibility=hidden",
        "-x", "c", str(SHIM), "-x", "none", f"-I{lib.include}", str(lib.archive),
        "-o", str(out), "-static-libstdc++", "-static-libgcc",
        "-Wl,--exclude-libs,ALL", "-Wl,--no-undefined", "-Wl,--gc-sections",
        f"-Wl,--version-script={exports}", "-lpthread", "-ldl", "-lrt", "-lm",
    ]  # fmt: skip


def build(lib: Library, cxx: Path | None, target: Path) -> Path:
    """Link the shim for `lib` into `target` (written whole or not at all)."""
    if cxx is None:
        raise ToolNotFoundError(
            f"the nvPTXCompiler library ({lib.archive}) is linked into tilec on this machine, "
            "and no C++ compiler was found: install g++ (with its static libstdc++: Debian's "
            "g++, RHEL's libstdc++-static) or set TILEC_CXX"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".nvptxcompiler-", dir=target.parent))
    try:
        exports = work / "exports.map"
        exports.write_text(_EXPORTS)
        cmd = build_command(cxx, lib, exports, work / "shim.so")
        # The compiler runs `as` and `ld` from PATH: its own directory's first.
        dirs = (str(cxx.parent), os.environ.get("PATH", ""), "/usr/bin:/bin")
        path = os.pathsep.join(d for d in dirs if d)
        env = {**os.environ, "PATH": path, "LC_ALL": "C"}
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=600, env=env
        )
        if proc.returncode != 0:
            raise ToolError(
                "linking the nvPTXCompiler shim (needs g++ with a static libstdc++)",
                cmd, proc.returncode, proc.stdout + proc.stderr, repro=shlex.join(cmd),
            )  # fmt: skip
        os.replace(work / "shim.so", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


class Shim:
    """The loaded shim: the library's version and PTX -> cubin."""

    def __init__(self, path: Path) -> None:
        import ctypes  # here: its import costs a millisecond, and a cache hit never needs it

        self.path = path
        self._dll = ctypes.CDLL(str(path))
        c = ctypes
        self._compile = self._dll.tilec_nvptxc_compile
        self._compile.restype = c.c_int
        self._compile.argtypes = [
            c.c_char_p, c.c_size_t, c.c_int, c.POINTER(c.c_char_p), c.POINTER(c.c_void_p),
            c.POINTER(c.c_size_t), c.POINTER(c.c_void_p), c.POINTER(c.c_void_p),
        ]  # fmt: skip
        self._free = self._dll.tilec_nvptxc_free
        self._free.argtypes = [c.c_void_p]
        major, minor = c.c_uint(), c.c_uint()
        self._dll.tilec_nvptxc_version(c.byref(major), c.byref(minor))
        self.api_version = (major.value, minor.value)

    def _take(self, pointer: ctypes.c_void_p, size: int | None = None) -> bytes:
        import ctypes

        if not pointer.value:
            return b""
        try:
            return ctypes.string_at(pointer.value, -1 if size is None else size)
        finally:
            self._free(pointer)

    def compile(self, ptx: bytes, options: list[str]) -> tuple[int, bytes, str, str]:
        """(result code, cubin, info log, error log)."""
        import ctypes as c

        opts = (c.c_char_p * len(options))(*(o.encode() for o in options))
        image, size, info, error = c.c_void_p(), c.c_size_t(), c.c_void_p(), c.c_void_p()
        rc: int = self._compile(
            ptx, len(ptx), len(options), opts, c.byref(image), c.byref(size), c.byref(info),
            c.byref(error),
        )  # fmt: skip
        cubin = self._take(image, size.value)
        return rc, cubin, self._take(info).decode(errors="replace"), self._take(error).decode(
            errors="replace"
        )


_SHIMS: dict[str, Shim] = {}
_LOCK = threading.Lock()


def load(lib: Library, settings: Settings, tools: Path | None) -> Shim:
    """The shim for `lib`, built on first use (under `tools`, the cache's tools directory, or a
    private directory where none is given or it cannot be written) and loaded once per process."""
    with _LOCK:
        shim = _SHIMS.get(lib.sha256)
        if shim is None:
            path = shim_path(lib, tools if tools is not None else _private_dir())
            if not path.is_file():
                try:
                    build(lib, find_cxx(settings), path)
                except OSError:  # a cache directory that cannot be written: this process's own
                    path = build(lib, find_cxx(settings), shim_path(lib, _private_dir()))
            shim = _SHIMS[lib.sha256] = Shim(path)
        return shim


@functools.cache
def _private_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="tilec-nvptxcompiler-"))
    import atexit

    atexit.register(shutil.rmtree, path, True)
    return path


# -- compiling ----------------------------------------------------------------------------------

# nvPTXCompileResult codes worth naming
_RESULTS = {3: "COMPILATION_FAILURE", 4: "INTERNAL", 5: "OUT_OF_MEMORY", 7: "UNSUPPORTED_PTX"}


def check_arch(lib: Library, arch: str) -> None:
    """TargetError where `lib`'s release does not know `arch` (sm_100 and up need a newer one,
    CUDA 13 dropped sm_50 to sm_72)."""
    problem = sm.release_problem(arch, lib.version)
    if problem is not None:
        raise TargetError(
            f"nvPTXCompiler {lib.version} ({lib.archive}) cannot compile for {arch}: {problem}; "
            f"install an nvidia-nvptxcompiler that does, or use assembler='ptxas' with a ptxas "
            "that does"
        )


def options(arch: str, ptxas_options: tuple[str, ...], opt_level: int) -> list[str]:
    """The library's options for what `ptxas -arch=ARCH -O<level> -v OPTIONS` does."""
    return [f"--gpu-name={arch}", f"-O{opt_level}", "--verbose", *ptxas_options]


def assemble(
    shim: Shim, lib: Library, ptx: str, arch: str, ptxas_options: tuple[str, ...], opt_level: int
) -> tuple[bytes, str]:
    """(cubin, info log: ptxas -v's report); a rejected PTX raises PtxasError with the log."""
    check_arch(lib, arch)
    opts = options(arch, ptxas_options, opt_level)
    rc, cubin, info, error = shim.compile(ptx.encode(), opts)
    if rc != 0 or not cubin:
        what = _RESULTS.get(rc, str(rc))
        if "is not defined for option 'gpu-name'" in error:
            raise TargetError(
                f"nvPTXCompiler {lib.version} does not know {arch} ({error.strip()}); install an "
                "nvidia-nvptxcompiler that does, or use assembler='ptxas' with a ptxas that does"
            )
        raise PtxasError(
            f"nvPTXCompiler {lib.version} (PTX -> cubin, NVPTXCOMPILE_ERROR_{what})",
            ["nvPTXCompiler", *opts],
            rc,
            f"{error}\n{info}",
            repro=shlex.join(["ptxas", f"-arch={arch}", f"-O{opt_level}", "-v", *ptxas_options,
                              "kernel.ptx"]),
        )  # fmt: skip
    return cubin, info
