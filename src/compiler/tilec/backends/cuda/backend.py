"""The in-tree backend `cuda`: LLVM's NVPTX target to PTX, ptxas to cubin, cuda-python to launch.

Targets: `cuda:90`, `cuda:sm_90`, `cuda:90a` (and the bare `sm_90` form). Stages:
`llir` (parsed, kernel chosen, specialized), `llir_opt` (libdevice linked, O0-O3),
`ptx`, `cubin` (when ptxas is found; without it the driver JITs the PTX). `sass`
is derived on demand with nvdisasm or cuobjdump.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, cast

from ... import native
from ...errors import CudaError, TargetError, ToolError, ToolNotFoundError
from ...kernel import CompiledKernel, CompileOptions, Metadata, Stage, StageContext
from ...launch import Dim3
from ...settings import Settings
from ..base import Backend, Target, front_end
from . import arch as sm
from . import cubin as elf
from . import driver, heap, nvjitlink, nvptxcompiler, toolchain
from .launch import native_launcher, pack_args
from .options import ASSEMBLERS, CudaMetadata, CudaOptions
from .ptxas import Resources, assemble, parse_verbose

TRIPLE = native.NVPTX_TRIPLE


def _md(md: Metadata) -> CudaMetadata:
    # Compiler.compile gives a CudaMetadata; a caller running stages one by one may
    # pass a plain Metadata, and gets the same attributes set on it.
    return cast(CudaMetadata, md)


class CudaKernel(CompiledKernel):
    """Loads the cubin (or PTX) once per CUDA context and caches the CUfunction.

    Launches go through the native launcher (`tilec._launch`): arguments are checked and
    packed in C++ and cuLaunchKernel is called there with the GIL released. Without the
    extension, or with TILEC_NATIVE_LAUNCH=0, the Python packer and cuda-python do it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict[int, tuple[Any, Any]] = {}  # context -> (CUmodule, CUfunction)
        self._lock = threading.Lock()
        self._native: Any = None
        self._native_made = False

    def _context_and_function(self) -> tuple[Any, Any]:
        ctx = driver.current_context()
        handle = int(ctx)
        with self._lock:
            loaded = self._loaded.get(handle)
            if loaded is None:
                cubin = self.asm.get("cubin")
                if cubin:
                    try:
                        module = driver.load_module(cubin, is_ptx=False)
                    except CudaError as exc:
                        raise self._load_error(exc) from None
                else:
                    module = driver.load_module(self.asm["ptx"].encode(), is_ptx=True)
                function = driver.get_function(module, self.name)
                loaded = (module, function)
                self._loaded[handle] = loaded
                # Metadata not made yet (a hit through a shortcut's head) is filled in when
                # it is (_metadata_made): a first launch parses no JSON for it.
                if self._metadata is not None:
                    _fill_from_function(self._metadata, function)
        return ctx, loaded[1]

    def _load_error(self, exc: CudaError) -> CudaError:
        """The driver's refusal of the cubin, saying so where its assembler is newer than the
        driver (read from the metadata only now: a hit's first launch parses no JSON)."""
        md = _md(self.metadata)
        release = md.nvptxcompiler_version or md.ptxas_version or md.nvjitlink_version
        try:
            why = driver.too_new(release, driver.driver_version())
        except CudaError:
            why = None
        if why is None:
            return exc
        return CudaError(
            exc.call, exc.code, exc.name,
            f"{why} ({md.assembler} made it): update the NVIDIA driver, or compile with an "
            "assembler of the driver's CUDA release (TILEC_PTXAS, or an nvidia-nvptxcompiler "
            "that old)",
        )  # fmt: skip

    def _metadata_made(self, metadata: Metadata) -> None:
        with self._lock:
            loaded = next(iter(self._loaded.values()), None)
        if loaded is not None:
            _fill_from_function(metadata, loaded[1])

    def _function(self) -> Any:
        return self._context_and_function()[1]

    def native_launcher(self) -> Any | None:
        """The kernel's `tilec._launch.Launcher` (made once), or None when launches go
        through Python."""
        if not self._native_made:
            self._native_made = True
            if self.settings is None or self.settings.native_launch:
                # A weak reference: the launcher is held by the kernel, and must not hold it.
                ref = weakref.ref(self)
                self._native = native_launcher(self.signature, functools.partial(_bind, ref))
        return self._native

    def _bind_native(self) -> None:
        """Make a context current, load the module there, and tell the native launcher."""
        ctx, function = self._context_and_function()
        self._native.bind(int(ctx), int(function), driver.current_device())

    def _make_launcher(self, grid: Dim3, block: Dim3) -> Callable[..., None]:
        native = self.native_launcher()
        if native is None:
            return super()._make_launcher(grid, block)
        bound: Callable[..., None] = native.config(*grid, *block)
        return bound

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        stream: Any = None,
        shared_mem: int = 0,
    ) -> None:
        native = self.native_launcher()
        if native is not None:
            native.launch(tuple(args), *grid, *block, shared_mem, stream)
            return
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
            raise TypeError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
        pack_args(self.signature, args)  # raises before touching the driver
        function = self._function()
        # Again, now that the device is known: a tensor on another device is refused too.
        packed = pack_args(self.signature, args, driver.current_device())
        cu_stream = driver.as_stream(stream)
        if shared_mem > 48 * 1024:
            driver.set_max_dynamic_shared(function, shared_mem)
        driver.launch(function, grid, block, shared_mem, cu_stream, packed.address)

    def close(self) -> None:
        if self._native is not None:
            self._native.unbind_all()
        with self._lock:
            loaded, self._loaded = self._loaded, {}
        for module, _ in loaded.values():
            driver.unload_module(module)


def _fill_from_function(metadata: Metadata, function: Any) -> None:
    """What ptxas did not report (no ptxas ran: the driver or nvJitLink assembled the PTX),
    from the loaded function."""
    md = _md(metadata)
    if md.registers is None:
        md.registers = driver.function_attribute(function, "CU_FUNC_ATTRIBUTE_NUM_REGS")
        md.shared_bytes = driver.function_attribute(function, "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        md.stack_bytes = driver.function_attribute(function, "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")


def _bind(ref: weakref.ReferenceType[CudaKernel]) -> None:
    kernel = ref()
    if kernel is None:  # pragma: no cover - the launcher lives inside its kernel
        raise CudaError("launch", -1, "CUDA_ERROR", "the kernel was closed and collected")
    kernel._bind_native()


def disassemble(settings: Settings, cubin: bytes) -> str:
    """SASS of a cubin with nvdisasm, or cuobjdump -sass when only that is there."""
    nvdisasm = toolchain.find_cuda_tool(settings, "nvdisasm")
    cuobjdump = toolchain.find_cuda_tool(settings, "cuobjdump")
    if nvdisasm is None and cuobjdump is None:
        raise ToolNotFoundError(
            "SASS needs nvdisasm or cuobjdump (CUDA toolkit bin/, PATH, CUDA_HOME, "
            "TILEC_NVDISASM/TILEC_CUOBJDUMP, or pip install nvidia-cuda-nvdisasm)"
        )
    with tempfile.TemporaryDirectory(prefix="tilec-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        if nvdisasm is not None:
            cmd = [str(nvdisasm), "-c", "-g", str(path)]
        else:
            assert cuobjdump is not None
            cmd = [str(cuobjdump), "-sass", str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
        if proc.returncode != 0:
            raise ToolError(
                "disassembling the cubin", cmd, proc.returncode, proc.stdout + proc.stderr
            )
        return proc.stdout


class CudaBackend(Backend):
    name = "cuda"
    version = "1"
    description = "LLVM NVPTX -> PTX -> cubin (ptxas), launched through cuda-python"
    binary_stage = "cubin"
    binary_format = "cubin"
    kernel_class = CudaKernel
    default_arch = "sm_90"
    options_class = CudaOptions
    metadata_class = CudaMetadata

    def options(self, options: CompileOptions) -> CudaOptions:
        parsed: CudaOptions = super().options(options)
        return parsed

    # -- targets -------------------------------------------------------------
    def parse_target(self, arch: str, options: CompileOptions) -> Target:
        info = native.target_info()
        own = self.options(options)
        proc = sm.normalize(arch)
        if proc is None or proc not in info.processors:
            spelled = arch if arch.startswith("sm_") else f"cuda:{arch}"
            raise TargetError(
                f"unknown target {spelled!r}; this LLVM ({native.llvm_version()}) knows: "
                f"{', '.join(p for p in info.processors if p.startswith('sm_'))} "
                "(write cuda:90, cuda:sm_90 or sm_90)"
            )
        if own.ptx_version is not None and own.ptx_version not in info.ptx_versions:
            raise TargetError(
                f"unknown PTX ISA version {own.ptx_version}; supported: "
                f"{', '.join(map(str, info.ptx_versions))} (80 means 8.0)"
            )
        return Target(self.name, proc, own.features)

    def quick_target(self, arch: str, options: CompileOptions) -> Target | None:
        proc = sm.normalize(arch)
        return Target(self.name, proc, self.options(options).features) if proc else None

    # -- stages --------------------------------------------------------------
    def stages(
        self, target: Target, options: CompileOptions, settings: Settings
    ) -> dict[str, Stage]:
        stages: dict[str, Stage] = {
            "llir": lambda src, ctx: front_end(src, ctx, TRIPLE, target.arch, target.features),
            "llir_opt": self._llir_opt,
            "ptx": self._ptx,
        }
        own = self.options(options)
        if own.use_ptxas:
            name = self.assembler(target, own, settings).name
            if name != "ptxas" or self.ptxas(settings) is not None:
                stages["cubin"] = self._cubin
        return stages

    @staticmethod
    def assembler(
        target: Target, own: CudaOptions, settings: Settings, tools: dict[str, Any] | None = None
    ) -> Choice:
        """Which assembler makes the cubin, and why where `auto` chose (see Choice); `tools`:
        the tools' identity where the caller has it (each asking stats every watched path)."""
        asked = own.assembler or settings.assembler
        if asked not in ASSEMBLERS:
            raise TargetError(
                f"TILEC_ASSEMBLER must be one of {', '.join(ASSEMBLERS)}, got {asked!r}"
            )
        if asked != "auto":
            return Choice(asked)
        return _auto(target, tools if tools is not None else toolchain.identity(settings))

    def _llir_opt(self, src: str, ctx: StageContext) -> str:
        md, opts, target = _md(ctx.metadata), ctx.options, ctx.target
        with native.NativeModule(src, name="<tilec llir>") as mod:
            needs = any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions())
            if needs:
                path = toolchain.find_libdevice(ctx.settings)
                md.libdevice = str(path)
                md.libdevice_linked = tuple(sorted(mod.link_internalized(str(path))))
            mod.set_module_flag("nvvm-reflect-ftz", 1 if self.options(opts).ftz else 0)
            ctx.passes += mod.optimize(
                target.arch, target.features, opts.opt_level, dump_passes=ctx.dump_passes
            )
            return mod.to_text()

    def _ptx(self, src: str, ctx: StageContext) -> str:
        with native.NativeModule(src, name="<tilec llir_opt>") as mod:
            return mod.emit_assembly(ctx.target.arch, ctx.target.features, ctx.options.opt_level)

    def _cubin(self, src: str, ctx: StageContext) -> bytes:
        md, opts = _md(ctx.metadata), ctx.options
        own = self.options(opts)
        level = min(opts.opt_level, 3)
        choice = self.assembler(ctx.target, own, ctx.settings)
        md.assembler, md.assembler_note = choice.name, choice.note
        if choice.name == "nvjitlink":
            md.nvjitlink_version = nvjitlink.version()
            heap.keep(ctx.settings)
            cubin, log = nvjitlink.assemble(src, ctx.target.arch, own.ptxas_options, level)
        elif choice.name == "nvptxcompiler":
            cubin, log = self._nvptxcompiler(src, ctx, own, choice)
        else:
            cubin, log = self._ptxas(src, ctx, own)
        md.ptxas_log = f"tilec: {md.assembler_note}\n{log}" if md.assembler_note else log
        res: Resources | None = parse_verbose(log).get(md.name)
        if res is not None:
            md.registers = res.registers
            md.shared_bytes = res.shared_bytes
            md.spill_stores = res.spill_stores
            md.spill_loads = res.spill_loads
            md.stack_bytes = res.stack_bytes
        return cubin

    def _ptxas(self, src: str, ctx: StageContext, own: CudaOptions) -> tuple[bytes, str]:
        md = _md(ctx.metadata)
        ptxas = self.ptxas(ctx.settings)
        if ptxas is None:
            raise ToolNotFoundError(
                "PTX -> cubin needs ptxas (CUDA toolkit bin/, PATH, CUDA_HOME, TILEC_PTXAS, or "
                "pip install nvidia-cuda-nvcc) or assembler='nvptxcompiler'"
            )
        md.ptxas, md.ptxas_version = str(ptxas.path), ptxas.version
        level = min(ctx.options.opt_level, 3)
        return assemble(ptxas.path, src, ctx.target.arch, own.ptxas_options, level)

    def _nvptxcompiler(
        self, src: str, ctx: StageContext, own: CudaOptions, choice: Choice
    ) -> tuple[bytes, str]:
        """In process; under `auto` a shim that cannot be built falls back to ptxas, and with
        TILEC_ASSEMBLER_CHECK=1 a cubin whose sections differ from ptxas's gives way to it."""
        md, settings = _md(ctx.metadata), ctx.settings
        level = min(ctx.options.opt_level, 3)
        lib = nvptxcompiler_library(settings)
        try:
            shim = nvptxcompiler.load(lib, settings, toolchain.memo_dir(settings))
        except (ToolError, ToolNotFoundError) as exc:
            if not choice.auto or self.ptxas(settings) is None:
                raise  # named, or nothing to fall back to: the shim's own error says what to do
            md.assembler = "ptxas"
            md.assembler_note = f"{choice.note}; fell back to ptxas: {str(exc).splitlines()[0]}"
            return self._ptxas(src, ctx, own)
        md.nvptxcompiler_version = lib.version
        heap.keep(settings)
        arch = ctx.target.arch
        cubin, log = nvptxcompiler.assemble(shim, lib, src, arch, own.ptxas_options, level)
        if choice.auto and settings.assembler_check and self.ptxas(settings) is not None:
            theirs, their_log = self._ptxas(src, ctx, own)
            differ = elf.differing_sections(cubin, theirs)
            if differ:
                md.assembler = "ptxas"
                md.assembler_note = (
                    f"{choice.note}; its cubin differed from ptxas's in {', '.join(differ)}: "
                    "ptxas's is used"
                )
                return theirs, their_log
            md.assembler_note = f"{choice.note}; checked: the same sections as ptxas's"
        return cubin, log

    # -- tools -----------------------------------------------------------------
    @staticmethod
    def ptxas(settings: Settings) -> toolchain.Ptxas | None:
        path = toolchain.find_ptxas(settings)
        if path is None:
            return None
        return toolchain.ptxas_info(path, toolchain.memo_dir(settings))

    def cache_key(self, target: Target, options: CompileOptions, settings: Settings) -> Any:
        own = self.options(options)
        tools = toolchain.identity(settings)
        name = self.assembler(target, own, settings, tools).name if own.use_ptxas else None
        nvptxc = tools["nvptxcompiler"]
        check = name == "nvptxcompiler" and settings.assembler_check
        return {
            "assembler": name,
            "ptxas": tools["ptxas"] if name == "ptxas" or check else None,
            # raises, saying what to install, where it is absent
            "nvjitlink": nvjitlink.version() if name == "nvjitlink" else None,
            "nvptxcompiler": nvptxc[1:] if name == "nvptxcompiler" and nvptxc else None,
            "check": check,
            "libdevice": tools["libdevice"],
        }

    def tool_watch(
        self, target: Target, options: CompileOptions, settings: Settings
    ) -> list[list[Any]] | None:
        own = self.options(options)
        if own.use_ptxas and (own.assembler or settings.assembler) == "nvjitlink":
            return None  # nvJitLink's library is not watched: its version is asked again
        record = toolchain.identity(settings)
        if record["ptxas"] is None or record["libdevice"] is None:
            return None  # a tool may yet appear in the nvidia-* wheels, which are not watched
        watch: list[list[Any]] = record["watch"]
        return watch

    def derived_stages(self, kernel: CompiledKernel) -> dict[str, Callable[[], Any]]:
        if "cubin" not in kernel.asm:
            return {}
        settings = kernel.settings or Settings.from_env()
        return {"sass": lambda: disassemble(settings, kernel.asm["cubin"])}


class Choice(NamedTuple):
    """The assembler of a compile: "ptxas", "nvptxcompiler" or "nvjitlink", and, where `auto`
    chose it, why (the stage log's first line says so). A named tuple: a cache hit keyed by the
    IR makes one."""

    name: str
    note: str = ""
    auto: bool = False


def nvptxcompiler_library(settings: Settings) -> nvptxcompiler.Library:
    """The nvPTXCompiler library the tools' identity found; ToolNotFoundError saying what to
    install where there is none."""
    # The identity is remembered and watched (a library installed or changed since is noticed),
    # so it stands for a search of its own: searching again walked the candidates every compile.
    ident = toolchain.identity(settings)["nvptxcompiler"]
    if ident is None:
        nvptxcompiler.find(settings)  # TILEC_NVPTXCOMPILER naming nothing: its own error
        raise ToolNotFoundError(
            f"assembler='nvptxcompiler' needs NVIDIA's PTX compiler library "
            f"({nvptxcompiler.ARCHIVE} and {nvptxcompiler.HEADER}): {nvptxcompiler.INSTALL}"
        )
    return nvptxcompiler.library(Path(ident[0]), ident[1], ident[2])


def _auto(target: Target, tools: dict[str, Any]) -> Choice:
    """nvPTXCompiler where it gives ptxas's code: the library is there, of the release of the
    ptxas that would run otherwise (or no ptxas is found), and it knows the arch; ptxas
    otherwise. Made from the tools' identity alone (a cache hit keyed by the IR asks it): a
    shim that then cannot be linked (no C++ compiler) makes the compile fall back to ptxas,
    whose code is the same, and say so (CudaBackend._nvptxcompiler)."""
    nvptxc, ptxas = tools["nvptxcompiler"], tools["ptxas"]
    if nvptxc is None:
        note = f"auto: ptxas (no nvPTXCompiler library: {nvptxcompiler.INSTALL})"
        return Choice("ptxas", note, True)
    path, release = nvptxc[0], nvptxc[1]
    if ptxas is not None and ptxas[1] != release:
        return Choice(
            "ptxas",
            f"auto: ptxas {ptxas[1]}, as nvPTXCompiler {release} ({path}) is of another release",
            True,
        )
    problem = sm.release_problem(target.arch, release)
    if problem is not None:
        return Choice("ptxas", f"auto: ptxas, as nvPTXCompiler {release} cannot: {problem}", True)
    same = f"the release of ptxas {ptxas[0]}" if ptxas is not None else "no ptxas found"
    return Choice("nvptxcompiler", f"auto: nvPTXCompiler {release} ({same})", True)
