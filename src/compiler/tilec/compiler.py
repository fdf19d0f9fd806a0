"""tilec.compile: LLVM IR -> optimized IR -> PTX -> cubin, as named stages, cached."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import llvmlite.ir

from . import driver, native, toolchain
from . import ir as tir
from .cache import Cache, Status, digest_json
from .errors import CompileError, TargetError
from .launch import Signature, launch_config, pack_args
from .ptxas import Resources, assemble, parse_verbose
from .settings import Settings

__version__ = "0.1.0"

_TARGET = re.compile(r"^sm_(\d+)a?$")


@dataclass(frozen=True)
class CompileOptions:
    target: str = "sm_90"
    ptx_version: int | None = None  # e.g. 80 for PTX ISA 8.0; None: LLVM's minimum for target
    opt_level: int = 3
    ftz: bool = False  # nvvm-reflect-ftz: libdevice flushes denormals
    kernel: str | None = None  # entry point; None: the module's only kernel
    ptxas_options: tuple[str, ...] = ()
    use_ptxas: bool = True  # False: leave cubin empty and let the driver JIT the PTX

    def validate(self) -> None:
        info = native.target_info()
        if not _TARGET.match(self.target) or self.target not in info.processors:
            raise TargetError(
                f"unknown target {self.target!r}; this LLVM ({native.llvm_version()}) knows: "
                f"{', '.join(p for p in info.processors if p.startswith('sm_'))}"
            )
        if self.ptx_version is not None and self.ptx_version not in info.ptx_versions:
            raise TargetError(
                f"unknown PTX ISA version {self.ptx_version}; supported: "
                f"{', '.join(map(str, info.ptx_versions))} (80 means 8.0)"
            )
        if self.opt_level not in (0, 1, 2, 3):
            raise TargetError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")

    @property
    def features(self) -> str:
        return f"+ptx{self.ptx_version}" if self.ptx_version is not None else ""

    def digest(self) -> str:
        return digest_json(asdict(self))


@dataclass
class Metadata:
    name: str
    target: str
    signature: tuple[str, ...]
    llvm_version: str
    tilec_version: str = __version__
    libdevice: str | None = None
    libdevice_linked: tuple[str, ...] = ()
    ptxas: str | None = None
    ptxas_version: str | None = None
    ptxas_log: str = ""
    registers: int | None = None
    shared_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Stage = Callable[[Any, Metadata], Any]


def _as_ir(src: str | bytes | llvmlite.ir.Module) -> str | bytes:
    if isinstance(src, llvmlite.ir.Module):
        return tir.to_text(src)
    if isinstance(src, (str, bytes, bytearray)):
        return bytes(src) if isinstance(src, bytearray) else src
    raise TypeError(
        f"expected LLVM IR text (str), bitcode (bytes) or a llvmlite.ir.Module, got "
        f"{type(src).__name__}"
    )


@functools.cache
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _sha_of(path: Path) -> str:
    st = path.stat()
    return _file_sha256(str(path), st.st_mtime_ns, st.st_size)


class Compiler:
    """Holds resolved settings and tools; `stages()` is the ordered pipeline."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.cache = Cache(self.settings.cache_dir, self.settings.cache_enabled)

    # -- stages ---------------------------------------------------------------
    def stages(self, opts: CompileOptions) -> dict[str, Stage]:
        stages: dict[str, Stage] = {
            "llir": lambda src, md: self.make_llir(src, md, opts),
            "llir_opt": lambda src, md: self.make_llir_opt(src, md, opts),
            "ptx": lambda src, md: self.make_ptx(src, md, opts),
        }
        if opts.use_ptxas and self.ptxas() is not None:
            stages["cubin"] = lambda src, md: self.make_cubin(src, md, opts)
        return stages

    def make_llir(self, src: str | bytes, md: Metadata, opts: CompileOptions) -> str:
        with native.NativeModule(src, name="<tilec input>") as mod:
            mod.set_target(opts.target, opts.features)
            kernels = [f for f in mod.functions() if f.is_kernel and not f.is_declaration]
            if opts.kernel is not None:
                chosen = [f for f in kernels if f.name == opts.kernel]
                if not chosen:
                    raise CompileError(
                        f"no kernel named {opts.kernel!r}; kernels: "
                        f"{', '.join(f.name for f in kernels) or 'none'}"
                    )
            elif len(kernels) != 1:
                raise CompileError(
                    "the module must define exactly one kernel (or pass kernel=...); found "
                    f"{', '.join(f.name for f in kernels) or 'none'} (mark kernels via "
                    "!nvvm.annotations or tilec.ir.kernel)"
                )
            else:
                chosen = kernels
            kern = chosen[0]
            Signature.from_llvm(kern.name, kern.param_types)  # refuse unsupported params early
            md.name = kern.name
            md.signature = kern.param_types
            return mod.to_text()

    def make_llir_opt(self, src: str, md: Metadata, opts: CompileOptions) -> str:
        with native.NativeModule(src, name="<tilec llir>") as mod:
            needs = any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions())
            if needs:
                path = toolchain.find_libdevice(self.settings)
                md.libdevice = str(path)
                md.libdevice_linked = tuple(sorted(mod.link_internalized(str(path))))
            mod.set_module_flag("nvvm-reflect-ftz", 1 if opts.ftz else 0)
            mod.optimize(opts.target, opts.features, opts.opt_level)
            return mod.to_text()

    def make_ptx(self, src: str, md: Metadata, opts: CompileOptions) -> str:
        with native.NativeModule(src, name="<tilec llir_opt>") as mod:
            return mod.emit_assembly(opts.target, opts.features, opts.opt_level)

    def make_cubin(self, src: str, md: Metadata, opts: CompileOptions) -> bytes:
        ptxas = self.ptxas()
        assert ptxas is not None
        cubin, log = assemble(
            ptxas.path, src, opts.target, opts.ptxas_options, min(opts.opt_level, 3)
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

    # -- tools ----------------------------------------------------------------
    def ptxas(self) -> toolchain.Ptxas | None:
        path = toolchain.find_ptxas(self.settings)
        return toolchain.ptxas_info(path) if path is not None else None

    # -- driver ---------------------------------------------------------------
    def cache_key(self, src: str | bytes, opts: CompileOptions) -> str:
        data = src.encode() if isinstance(src, str) else src
        ptxas = self.ptxas() if opts.use_ptxas else None
        libdevice: str | None = None
        try:
            libdevice = _sha_of(toolchain.find_libdevice(self.settings))
        except Exception:
            libdevice = None
        return digest_json(
            {
                "ir": hashlib.sha256(data).hexdigest(),
                "options": opts.digest(),
                "tilec": __version__,
                "llvm": native.llvm_version(),
                "ptxas": [str(ptxas.path), ptxas.version] if ptxas else None,
                "libdevice": libdevice,
            }
        )

    def compile(
        self, src: str | bytes | llvmlite.ir.Module, opts: CompileOptions
    ) -> CompiledKernel:
        opts.validate()
        ir_src = _as_ir(src)
        key = self.cache_key(ir_src, opts)
        payload, status = self.cache.get(key)
        if payload is not None:
            try:
                return CompiledKernel._from_payload(payload, opts, key, status)
            except (KeyError, TypeError, ValueError):
                status = "corrupt"
        md = Metadata(name="", target=opts.target, signature=(), llvm_version=native.llvm_version())
        ptxas = self.ptxas() if opts.use_ptxas else None
        if ptxas is not None:
            md.ptxas, md.ptxas_version = str(ptxas.path), ptxas.version
        asm: dict[str, Any] = {}
        current: Any = ir_src
        for name, stage in self.stages(opts).items():
            current = stage(current, md)
            asm[name] = current
        kernel = CompiledKernel(asm, md, opts, key, status)
        self.cache.put(key, kernel._payload())
        return kernel


class _Launcher:
    def __init__(self, kernel: CompiledKernel, grid: Any, block: Any) -> None:
        self.kernel = kernel
        self.grid, self.block = launch_config(grid, block)

    def __call__(self, *args: Any, stream: Any = None, shared_mem: int = 0) -> None:
        self.kernel.launch(self.grid, self.block, args, stream=stream, shared_mem=shared_mem)


class CompiledKernel:
    """Stages (`asm`), metadata, and a launcher: `kernel[grid, block](*args)`.

    Modules load once per CUDA context and the CUfunction is cached;
    `close()` (or `with`) unloads them deterministically.
    """

    def __init__(
        self,
        asm: Mapping[str, Any],
        metadata: Metadata,
        options: CompileOptions,
        key: str,
        cache_status: Status,
    ) -> None:
        self.asm: dict[str, Any] = dict(asm)
        self.metadata = metadata
        self.options = options
        self.key = key
        self.cache_status: Status = cache_status
        self.name = metadata.name
        self.signature = Signature.from_llvm(metadata.name, metadata.signature)
        self._loaded: dict[int, tuple[Any, Any]] = {}  # context -> (CUmodule, CUfunction)
        self._lock = threading.Lock()

    # -- serialization for the cache -------------------------------------------
    def _payload(self) -> dict[str, Any]:
        asm = {
            k: ({"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else {"text": v})
            for k, v in self.asm.items()
        }
        md = asdict(self.metadata)
        md["signature"] = list(self.metadata.signature)
        md["libdevice_linked"] = list(self.metadata.libdevice_linked)
        return {"asm": asm, "order": list(self.asm), "metadata": md}

    @classmethod
    def _from_payload(
        cls, payload: dict[str, Any], opts: CompileOptions, key: str, status: Status
    ) -> CompiledKernel:
        asm: dict[str, Any] = {}
        for name in payload["order"]:
            item = payload["asm"][name]
            asm[name] = base64.b64decode(item["b64"]) if "b64" in item else str(item["text"])
        md_raw = dict(payload["metadata"])
        md_raw["signature"] = tuple(md_raw["signature"])
        md_raw["libdevice_linked"] = tuple(md_raw["libdevice_linked"])
        return cls(asm, Metadata(**md_raw), opts, key, status)

    # -- inspection ---------------------------------------------------------------
    def dump(self, directory: str | Path) -> list[Path]:
        """Write every stage to `directory` (kernel.llir, kernel.ptx, kernel.cubin, ...)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for stage, value in self.asm.items():
            path = out / f"{self.name}.{stage}"
            if isinstance(value, bytes):
                path.write_bytes(value)
            else:
                path.write_text(value)
            written.append(path)
        return written

    # -- runtime --------------------------------------------------------------------
    def _function(self) -> Any:
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
                if self.metadata.registers is None:
                    self.metadata.registers = driver.function_attribute(
                        function, "CU_FUNC_ATTRIBUTE_NUM_REGS"
                    )
                    self.metadata.shared_bytes = driver.function_attribute(
                        function, "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"
                    )
                    self.metadata.stack_bytes = driver.function_attribute(
                        function, "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"
                    )
        return loaded[1]

    def __getitem__(self, config: tuple[Any, Any]) -> _Launcher:
        if not isinstance(config, tuple) or len(config) != 2:
            raise TypeError("launch as kernel[grid, block](*args)")
        return _Launcher(self, config[0], config[1])

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        stream: Any = None,
        shared_mem: int = 0,
    ) -> None:
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
            raise TypeError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
        packed = pack_args(self.signature, args)  # raises before touching the driver
        function = self._function()
        cu_stream = driver.as_stream(stream)
        if shared_mem > 48 * 1024:
            driver.set_max_dynamic_shared(function, shared_mem)
        driver.launch(function, grid, block, shared_mem, cu_stream, packed.address)

    def close(self) -> None:
        with self._lock:
            loaded, self._loaded = self._loaded, {}
        for module, _ in loaded.values():
            driver.unload_module(module)

    def __enter__(self) -> CompiledKernel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.signature} {self.options.target} stages={list(self.asm)}>"


def compile(
    src: str | bytes | llvmlite.ir.Module,
    target: str = "sm_90",
    ptx_version: int | None = None,
    opt_level: int = 3,
    *,
    ftz: bool = False,
    kernel: str | None = None,
    ptxas_options: tuple[str, ...] = (),
    use_ptxas: bool = True,
    settings: Settings | None = None,
) -> CompiledKernel:
    """Compile one kernel of `src` (IR text, bitcode, or a llvmlite.ir.Module)."""
    opts = CompileOptions(
        target=target,
        ptx_version=ptx_version,
        opt_level=opt_level,
        ftz=ftz,
        kernel=kernel,
        ptxas_options=tuple(ptxas_options),
        use_ptxas=use_ptxas,
    )
    return Compiler(settings).compile(src, opts)
