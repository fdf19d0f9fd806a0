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
from typing import Any, cast

from ... import native
from ...errors import CudaError, TargetError, ToolError, ToolNotFoundError
from ...kernel import CompiledKernel, CompileOptions, Metadata, Stage, StageContext
from ...launch import Dim3
from ...settings import Settings
from ..base import Backend, Target, front_end
from . import arch as sm
from . import driver, nvjitlink, toolchain
from .launch import native_launcher, pack_args
from .options import CudaMetadata, CudaOptions
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
                    module = driver.load_module(cubin, is_ptx=False)
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
        if own.use_ptxas and (own.assembler == "nvjitlink" or self.ptxas(settings) is not None):
            stages["cubin"] = self._cubin
        return stages

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
        md.assembler = own.assembler
        if own.assembler == "nvjitlink":
            md.nvjitlink_version = nvjitlink.version()
            cubin, log = nvjitlink.assemble(
                src, ctx.target.arch, own.ptxas_options, min(opts.opt_level, 3)
            )
        else:
            ptxas = self.ptxas(ctx.settings)
            assert ptxas is not None
            md.ptxas, md.ptxas_version = str(ptxas.path), ptxas.version
            cubin, log = assemble(
                ptxas.path, src, ctx.target.arch, own.ptxas_options, min(opts.opt_level, 3)
            )
        md.ptxas_log = log
        res: Resources | None = parse_verbose(log).get(md.name)
        if res is not None:
            md.registers = res.registers
            md.shared_bytes = res.shared_bytes
            md.spill_stores = res.spill_stores
            md.spill_loads = res.spill_loads
            md.stack_bytes = res.stack_bytes
        return cubin

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
        nvjitlink_version = None
        if own.use_ptxas and own.assembler == "nvjitlink":
            nvjitlink_version = nvjitlink.version()  # raises, saying what to install, if absent
        return {
            "ptxas": tools["ptxas"] if own.use_ptxas and own.assembler == "ptxas" else None,
            "nvjitlink": nvjitlink_version,
            "libdevice": tools["libdevice"],
        }

    def tool_watch(
        self, target: Target, options: CompileOptions, settings: Settings
    ) -> list[list[Any]] | None:
        own = self.options(options)
        if own.use_ptxas and own.assembler == "nvjitlink":
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
