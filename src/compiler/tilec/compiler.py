"""tilec.compile: IR -> the backend's named stages (llir, llir_opt, ptx, cubin for cuda), cached.

The driver is backend-independent: it resolves the target through the backend
registry, runs the backend's stages in order, keeps every output, caches the
result and writes stage dumps (TILEC_DUMP_DIR / `dump_dir=`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import llvmlite.ir

from . import ir as tir
from . import native, toolchain
from .backends.base import Backend, Target
from .backends.nvptx import CudaBackend
from .backends.registry import Registry, registry_for
from .cache import Cache, digest_json
from .errors import BackendError, ToolNotFoundError
from .kernel import (
    CompiledKernel,
    CompileOptions,
    Metadata,
    Stage,
    StageContext,
    Stages,
    __version__,
)
from .settings import Settings
from .specialize import Constant, ParamRef, Specialization

__all__ = [
    "Cache",
    "CompileOptions",
    "CompiledKernel",
    "Compiler",
    "Metadata",
    "Stage",
    "StageContext",
    "Stages",
    "__version__",
    "compile",
]

CACHE_LAYOUT = 2  # bump when payloads change shape


def _as_ir(src: str | bytes | llvmlite.ir.Module) -> str | bytes:
    if isinstance(src, llvmlite.ir.Module):
        return tir.to_text(src)
    if isinstance(src, (str, bytes, bytearray)):
        return bytes(src) if isinstance(src, bytearray) else src
    raise TypeError(
        f"expected LLVM IR text (str), bitcode (bytes) or a llvmlite.ir.Module, got "
        f"{type(src).__name__}"
    )


class Compiler:
    """Holds resolved settings, the backend registry and the cache."""

    def __init__(self, settings: Settings | None = None, registry: Registry | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.cache = Cache(self.settings.cache_dir, self.settings.cache_enabled)
        self.registry = registry or registry_for(self.settings.plugin_dirs)

    def resolve(self, opts: CompileOptions) -> tuple[Backend, Target]:
        return self.registry.resolve(opts.target, opts)

    def stages(self, opts: CompileOptions) -> dict[str, Callable[[Any, Metadata], Any]]:
        """The target's stages as `(input, metadata) -> output`, for running one at a time.

        Calls with the same metadata object share one StageContext (earlier outputs,
        pass dumps), as in compile().
        """
        backend, target = self.resolve(opts)
        contexts: dict[int, StageContext] = {}

        def wrap(name: str, stage: Stage) -> Callable[[Any, Metadata], Any]:
            def run(src: Any, md: Metadata) -> Any:
                ctx = contexts.setdefault(id(md), StageContext(self.settings, target, opts, md))
                out = ctx.outputs[name] = stage(src, ctx)
                return out

            return run

        return {name: wrap(name, st) for name, st in self._stages(backend, target, opts).items()}

    def _stages(self, backend: Backend, target: Target, opts: CompileOptions) -> dict[str, Stage]:
        stages = backend.stages(target, opts, self.settings)
        if isinstance(backend, CudaBackend):
            # A subclass that overrides make_<stage> (e.g. another PTX -> cubin) gets it used.
            for name in list(stages):
                method = getattr(type(self), f"make_{name}", None)
                if method is not None and method is not getattr(Compiler, f"make_{name}"):
                    stages[name] = functools.partial(self._legacy_stage, name)
        return stages

    def _legacy_stage(self, name: str, src: Any, ctx: StageContext) -> Any:
        return getattr(self, f"make_{name}")(src, ctx.metadata, ctx.options)

    # -- the cuda backend's stages one by one: (input, metadata, options) -------------
    def _cuda(self, name: str, src: Any, md: Metadata, opts: CompileOptions) -> Any:
        backend, target = self.resolve(opts)
        if not isinstance(backend, CudaBackend):
            raise BackendError(
                f"make_{name} runs the cuda backend's stage; {opts.target} is not cuda"
            )
        stage = backend.stages(target, replace(opts, use_ptxas=True), self.settings).get(name)
        if stage is None:
            raise ToolNotFoundError("the cubin stage needs ptxas; none was found")
        return stage(src, StageContext(self.settings, target, opts, md))

    def make_llir(self, src: str | bytes, md: Metadata, opts: CompileOptions) -> str:
        return str(self._cuda("llir", src, md, opts))

    def make_llir_opt(self, src: str, md: Metadata, opts: CompileOptions) -> str:
        return str(self._cuda("llir_opt", src, md, opts))

    def make_ptx(self, src: str, md: Metadata, opts: CompileOptions) -> str:
        return str(self._cuda("ptx", src, md, opts))

    def make_cubin(self, src: str, md: Metadata, opts: CompileOptions) -> bytes:
        return bytes(self._cuda("cubin", src, md, opts))

    def ptxas(self) -> toolchain.Ptxas | None:
        path = toolchain.find_ptxas(self.settings)
        if path is None:
            return None
        return toolchain.ptxas_info(path, toolchain.memo_dir(self.settings))

    def cache_key(
        self, src: str | bytes, opts: CompileOptions, backend: Backend, target: Target
    ) -> str:
        data = src.encode() if isinstance(src, str) else src
        return digest_json(
            {
                "layout": CACHE_LAYOUT,
                "ir": hashlib.sha256(data).hexdigest(),
                "options": opts.digest(),
                "target": str(target),
                "tilec": __version__,
                "llvm": native.built_llvm_version(),
                "backend": [backend.name, backend.version, type(backend).__qualname__],
                "tools": backend.cache_key(target, opts, self.settings),
            }
        )

    def _lookup(
        self, key: str, opts: CompileOptions, backend: Backend, target: Target
    ) -> tuple[CompiledKernel | None, Any]:
        payload, status = self.cache.get(key)
        if payload is None:
            return None, status
        try:
            asm, md = CompiledKernel._parse_payload(payload)
            kernel = backend.make_kernel(asm, md, opts, key, status, target, settings=self.settings)
        except (KeyError, TypeError, ValueError):
            return None, "corrupt"
        return kernel, status

    def compile(
        self,
        src: str | bytes | llvmlite.ir.Module,
        opts: CompileOptions,
        *,
        dump_dir: str | Path | None = None,
        dump_passes: bool | None = None,
    ) -> CompiledKernel:
        """Compile (or fetch from the cache); with dumps asked for, write every stage.

        Pass dumps need a real compile, so `dump_passes` skips reading the cache.
        """
        opts.validate()
        ir_src = _as_ir(src)
        passes = self.settings.dump_passes if dump_passes is None else dump_passes
        out_dir = Path(dump_dir) if dump_dir is not None else self.settings.debug_dump_dir

        kernel: CompiledKernel | None = None
        status: Any = "miss"
        looked_up: str | None = None
        if not passes and self.cache.enabled:
            # The hit path: a built-in backend's target is named without scanning plugins
            # or loading the native core, and a hit needs neither (a key exists only for
            # options that once compiled). A miss goes on to the full, validating path.
            quick = self.registry.resolve_quick(opts.target, opts)
            if quick is not None:
                looked_up = self.cache_key(ir_src, opts, *quick)
                kernel, status = self._lookup(looked_up, opts, *quick)
                if kernel is not None:
                    if out_dir is not None:
                        kernel.dump(out_dir / f"{kernel.name}-{looked_up[:12]}", metadata=True)
                    return kernel
        backend, target = self.resolve(opts)
        key = self.cache_key(ir_src, opts, backend, target)
        if not passes and key != looked_up:
            kernel, status = self._lookup(key, opts, backend, target)
        if kernel is None:
            md = Metadata(
                name="",
                target=target.arch,
                signature=(),
                llvm_version=native.llvm_version(),
                backend=backend.name,
            )
            ctx = StageContext(self.settings, target, opts, md, dump_passes=passes)
            produced: dict[str, Any] = {}
            current: Any = ir_src
            for name, stage in self._stages(backend, target, opts).items():
                current = stage(current, ctx)
                produced[name] = ctx.outputs[name] = current
            kernel = backend.make_kernel(
                produced, md, opts, key, status, target, settings=self.settings
            )
            kernel.passes = tuple(ctx.passes)
            self.cache.put(key, kernel._payload())
        if out_dir is not None:
            kernel.dump(out_dir / f"{kernel.name}-{key[:12]}", metadata=True)
        return kernel


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
    constants: Mapping[ParamRef, Constant] | Iterable[tuple[ParamRef, Constant]] | None = None,
    multiple_of: Mapping[ParamRef, int] | Iterable[tuple[ParamRef, int]] | None = None,
    settings: Settings | None = None,
    dump_dir: str | Path | None = None,
    dump_passes: bool | None = None,
) -> CompiledKernel:
    """Compile one kernel of `src` (IR text, bitcode, or a llvmlite.ir.Module).

    `target`: "cuda:90" / "sm_90" (in tree), or "<plugin>:<arch>". `constants` fixes
    parameters (by name or index) at compile time; `multiple_of` lets the kernel
    assume integer parameters are multiples of k. The entry point's name then
    carries the specialization (e.g. `vadd__n_1024`) and launches take only the
    parameters left. `dump_dir` (default: TILEC_DUMP_DIR) receives every stage;
    `dump_passes` (default: TILEC_DUMP_PASSES) adds the IR after each LLVM pass.
    """
    spec = Specialization.make(constants, multiple_of)
    opts = CompileOptions(
        target=target,
        ptx_version=ptx_version,
        opt_level=opt_level,
        ftz=ftz,
        kernel=kernel,
        ptxas_options=tuple(ptxas_options),
        use_ptxas=use_ptxas,
        constants=spec.constants,
        multiple_of=spec.multiple_of,
    )
    return Compiler(settings).compile(src, opts, dump_dir=dump_dir, dump_passes=dump_passes)
