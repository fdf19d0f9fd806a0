"""PTX -> cubin inside the process with nvJitLink (cuda-bindings' `cuda.bindings.nvjitlink`).

The `assembler="nvjitlink"` option of the cuda backend. It saves the ptxas process (most
of a cold compile of a small kernel), but its SASS is not ptxas's: nvJitLink compiles PTX as
relocatable device code and then links, and its code is that of `ptxas -c`, not of ptxas's
whole-program default (bench/tilec_assembler.py shows it on every bench kernel; none of its
option variants there changes it). So ptxas stays the default.
cuda-bindings is imported on first use only: importing it costs tens of milliseconds.
"""

from __future__ import annotations

import functools
from types import ModuleType

from ...errors import ToolError, ToolNotFoundError

_INSTALL = "pip install 'cuda-bindings>=12.6' nvidia-nvjitlink (or a CUDA toolkit's libnvJitLink)"


@functools.cache
def module() -> ModuleType:
    """cuda.bindings.nvjitlink, with its library loaded; ToolNotFoundError says what to install."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError as exc:
        raise ToolNotFoundError(
            f'assembler="nvjitlink" needs cuda-bindings: {_INSTALL} (import failed: {exc})'
        ) from exc
    try:
        nvjitlink.version()  # loads libnvJitLink: a missing library is reported here
    except Exception as exc:
        raise ToolNotFoundError(
            f'assembler="nvjitlink" needs the nvJitLink library: {_INSTALL} ({exc})'
        ) from exc
    mod: ModuleType = nvjitlink
    return mod


@functools.cache
def version() -> str:
    """nvJitLink's version, e.g. "13.0" (part of the cache key with this assembler)."""
    return ".".join(str(v) for v in module().version())


def options(arch: str, ptxas_options: tuple[str, ...], opt_level: int) -> list[str]:
    """nvJitLink's options for what `ptxas -arch=ARCH -O<level> -v OPTIONS` would do."""
    return [
        f"-arch={arch}",
        f"-O{opt_level}",
        "-Xptxas=-v",  # resource usage in the info log, as ptxas -v prints it
        # Where a CUDA driver is installed, nvJitLink otherwise also keeps its results in the
        # driver's JIT cache (~/.nv/ComputeCache): on an H100 runner that cost ~180 ms on the
        # first compile in each process (bench/nvjitlink_cache.py), and tilec caches the cubin
        # itself. The option does not change the code.
        "-no-cache",
        *(f"-Xptxas={o}" for o in ptxas_options),
    ]


def _log(nj: ModuleType, handle: int, kind: str) -> str:
    try:
        size = getattr(nj, f"get_{kind}_log_size")(handle)
        if not size:
            return ""
        buf = bytearray(size)
        getattr(nj, f"get_{kind}_log")(handle, buf)
        return bytes(buf).rstrip(b"\0").decode(errors="replace")
    except Exception as exc:  # a log that cannot be read must not hide the real error
        return f"(no {kind} log: {exc!r})"


def assemble(
    ptx: str,
    arch: str,
    ptxas_options: tuple[str, ...] = (),
    opt_level: int = 3,
    opts: list[str] | None = None,
) -> tuple[bytes, str]:
    """(cubin, info log); a failure raises ToolError with nvJitLink's error log.

    `opts` replaces the option list `options()` would make (the assembler bench tries variants).
    """
    nj = module()
    opts = options(arch, ptxas_options, opt_level) if opts is None else opts
    data = ptx.encode()
    handle = nj.create(len(opts), opts)
    try:
        try:
            nj.add_data(handle, nj.InputType.PTX, data, len(data), "tilec.ptx")
            nj.complete(handle)
        except Exception as exc:
            raise ToolError(
                "nvJitLink (PTX -> cubin)",
                ["nvJitLink", *opts],
                -1,
                f"{exc}\n{_log(nj, handle, 'error')}",
                repro=f"ptxas {' '.join(o.removeprefix('-Xptxas=') for o in opts)} kernel.ptx",
            ) from exc
        cubin = bytearray(nj.get_linked_cubin_size(handle))
        nj.get_linked_cubin(handle, cubin)
        info = _log(nj, handle, "info")
    finally:
        nj.destroy(handle)
    if not cubin:
        raise ToolError("nvJitLink (PTX -> cubin)", ["nvJitLink", *opts], -1, "empty cubin")
    return bytes(cubin), info
