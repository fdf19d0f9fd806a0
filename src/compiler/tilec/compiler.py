"""tilec.compile: IR -> the backend's named stages (llir, llir_opt, ptx, cubin for cuda), cached.

The driver is backend-independent: it resolves the target through the backend
registry, runs the backend's stages in order, keeps every output, caches the
result and writes stage dumps (TILEC_DUMP_DIR / `dump_dir=`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import llvmlite.ir

from . import native
from .backends.base import Backend, Target
from .backends.registry import Registry, registry_for
from .cache import Cache
from .cache.key import CACHE_LAYOUT, Key, as_ir, digest, key_base
from .cache.store import Store
from .errors import BackendError
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
    "CACHE_LAYOUT",
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

_as_ir = as_ir  # the name bench/ used before the cache layer had it


class Compiler:
    """Holds resolved settings, the backend registry and the cache."""

    def __init__(self, settings: Settings | None = None, registry: Registry | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self.cache = Cache(self.settings.cache_dir, self.settings.cache_enabled)
        self.store = Store(self.cache, self.settings)
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
        # A subclass that defines make_<stage> (e.g. another PTX -> cubin) gets it used.
        for name in list(stages):
            if callable(getattr(type(self), f"make_{name}", None)):
                stages[name] = functools.partial(self._subclass_stage, name)
        return stages

    def _subclass_stage(self, name: str, src: Any, ctx: StageContext) -> Any:
        return getattr(self, f"make_{name}")(src, ctx.metadata, ctx.options)

    def __getattr__(self, attr: str) -> Callable[[Any, Metadata, CompileOptions], Any]:
        """`make_<stage>(src, metadata, options)`: one stage of the options' target, on its own
        (e.g. `make_ptx` of cuda); a subclass may define one to replace that stage."""
        if not attr.startswith("make_") or attr == "make_":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        name = attr[len("make_") :]

        def run(src: Any, md: Metadata, opts: CompileOptions) -> Any:
            backend, target = self.resolve(opts)
            stage = backend.stages(target, opts, self.settings).get(name)
            if stage is None:
                raise BackendError(
                    f"backend {backend.name!r} has no stage {name!r} for {opts.target} "
                    f"with these options; stages: "
                    f"{', '.join(backend.stages(target, opts, self.settings))}"
                )
            return stage(src, StageContext(self.settings, target, opts, md))

        return run

    def key_base(self, opts: CompileOptions, backend: Backend, target: Target) -> dict[str, Any]:
        """Everything the cache key holds except the IR (tilec.cache.key)."""
        return key_base(self.settings, opts, backend, target)

    def cache_key(
        self, src: str | bytes, opts: CompileOptions, backend: Backend, target: Target
    ) -> str:
        return digest(src, self.key_base(opts, backend, target))

    def key(
        self,
        src: str | bytes | llvmlite.ir.Module,
        opts: CompileOptions,
        source_key: str | None = None,
    ) -> Key:
        """The compile's key, each part made when first asked (a hit through a shortcut makes
        neither the IR's text nor the tools' part)."""
        return Key(self.settings, self.registry, src, opts, source_key)

    def compile(
        self,
        src: str | bytes | llvmlite.ir.Module,
        opts: CompileOptions,
        *,
        dump_dir: str | Path | None = None,
        dump_passes: bool | None = None,
        source_key: str | None = None,
    ) -> CompiledKernel:
        """Compile (or fetch from the cache); with dumps asked for, write every stage.

        key -> store -> stages -> store. Pass dumps need a real compile, so `dump_passes`
        skips reading the cache. `source_key`: see `tilec.compile`.
        """
        opts.validate()
        passes = self.settings.dump_passes if dump_passes is None else dump_passes
        out_dir = Path(dump_dir) if dump_dir is not None else self.settings.debug_dump_dir
        key = Key(self.settings, self.registry, src, opts, source_key)
        kernel = None if passes else self.store.get(key)
        if kernel is None:
            kernel = self.run_stages(key, passes)
            self.store.put(key, kernel)
        if out_dir is not None:
            kernel.dump(out_dir / f"{kernel.name}-{kernel.key[:12]}", metadata=True)
        return kernel

    def run_stages(self, key: Key, dump_passes: bool = False) -> CompiledKernel:
        """The backend's stages in order on the key's IR, every output kept."""
        backend, target = key.resolved()
        md = backend.metadata_class(
            name="",
            target=target.arch,
            signature=(),
            llvm_version=native.llvm_version(),
            backend=backend.name,
        )
        ctx = StageContext(self.settings, target, key.opts, md, dump_passes=dump_passes)
        produced: dict[str, Any] = {}
        current: Any = key.ir
        for name, stage in self._stages(backend, target, key.opts).items():
            current = stage(current, ctx)
            produced[name] = ctx.outputs[name] = current
        kernel = backend.make_kernel(
            produced, md, key.opts, key.digest, key.status, target, settings=self.settings
        )
        kernel.passes = tuple(ctx.passes)
        return kernel


def compile(
    src: str | bytes | llvmlite.ir.Module,
    target: str = "sm_90",
    *,
    opt_level: int = 3,
    kernel: str | None = None,
    constants: Mapping[ParamRef, Constant] | Iterable[tuple[ParamRef, Constant]] | None = None,
    multiple_of: Mapping[ParamRef, int] | Iterable[tuple[ParamRef, int]] | None = None,
    settings: Settings | None = None,
    dump_dir: str | Path | None = None,
    dump_passes: bool | None = None,
    source_key: str | None = None,
    **backend_options: Any,
) -> CompiledKernel:
    """Compile one kernel of `src` (IR text, bitcode, or a llvmlite.ir.Module).

    `target`: "cuda:90" / "sm_90" (in tree), or "<plugin>:<arch>". `constants` fixes
    parameters (by name or index) at compile time; `multiple_of` lets the kernel
    assume integer parameters are multiples of k. The entry point's name then
    carries the specialization (e.g. `vadd__n_1024`) and launches take only the
    parameters left. `dump_dir` (default: TILEC_DUMP_DIR) receives every stage;
    `dump_passes` (default: TILEC_DUMP_PASSES) adds the IR after each LLVM pass.
    `source_key`: the caller's name for this exact IR (say, a digest of the front end's
    source): with it a cache hit reads a shortcut and never prints or hashes the IR (for an
    llvmlite module, about a third of a hit in a fresh process). It must change whenever
    the IR does; the options, target and tools are keyed as always.
    Other keywords are the backend's own options, e.g. for cuda `ptx_version=80`,
    `ftz=True`, `ptxas_options=(...)`, `use_ptxas=False` (see CudaOptions); a backend
    refuses names it does not know.
    """
    if constants is None and multiple_of is None:
        fixed: tuple[Any, ...] = ()
        multiples: tuple[Any, ...] = ()
    else:
        spec = Specialization.make(constants, multiple_of)
        fixed, multiples = spec.constants, spec.multiple_of
    opts = CompileOptions(
        target=target,
        opt_level=opt_level,
        kernel=kernel,
        constants=fixed,
        multiple_of=multiples,
        backend_options=backend_options,
    )
    return Compiler(settings).compile(
        src, opts, dump_dir=dump_dir, dump_passes=dump_passes, source_key=source_key
    )
