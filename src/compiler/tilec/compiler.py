"""tilec.compile: IR -> the backend's named stages (llir, llir_opt, ptx, cubin for cuda), cached.

The driver is backend-independent: it resolves the target through the backend
registry, runs the backend's stages in order, keeps every output, caches the
result and writes stage dumps (TILEC_DUMP_DIR / `dump_dir=`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import llvmlite.ir

from . import ir as tir
from . import native
from .backends.base import Backend, Target
from .backends.registry import Registry, registry_for
from .cache import (
    Cache,
    Entry,
    Shortcut,
    decode,
    digest_bytes,
    digest_json,
    file_state,
    first_part,
    rest_checked,
)
from .errors import BackendError, CacheError
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

CACHE_LAYOUT = 5  # bump when payloads or keys change shape


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
        """Everything the cache key holds except the IR: options, target, versions, tools."""
        return {
            "layout": CACHE_LAYOUT,
            "options": opts.digest(),
            "backend_options": backend.options_digest(opts),
            "target": str(target),
            "tilec": __version__,
            "llvm": native.built_llvm_version(),
            "backend": [backend.name, backend.version, type(backend).__qualname__],
            "tools": backend.cache_key(target, opts, self.settings),
        }

    def cache_key(
        self, src: str | bytes, opts: CompileOptions, backend: Backend, target: Target
    ) -> str:
        return _key(src, self.key_base(opts, backend, target))

    def _lookup(
        self, key: str, opts: CompileOptions, backend: Backend, target: Target
    ) -> tuple[CompiledKernel | None, Any, bytes | None]:
        """(kernel, status, the entry's bytes) for `key` from its own file."""
        entry, status = self.cache.get(key)
        if entry is None:
            return None, status, None
        kernel = self._kernel(entry, key, status, opts, backend, target)
        return (kernel, status, entry.raw) if kernel is not None else (None, "corrupt", None)

    def _kernel(
        self,
        entry: Entry,
        key: str,
        status: Any,
        opts: CompileOptions,
        backend: Backend,
        target: Target,
        rest: Callable[[], Mapping[str, bytes]] | None = None,
    ) -> CompiledKernel | None:
        try:
            asm, md = CompiledKernel._parse_payload(
                entry.payload, entry.parts, backend.metadata_class, rest
            )
            return backend.make_kernel(
                asm, md, opts, key, status, target, settings=self.settings
            )
        except (KeyError, TypeError, ValueError):
            return None

    def lookup(
        self,
        src: str | bytes | llvmlite.ir.Module,
        opts: CompileOptions,
        source_key: str | None = None,
    ) -> _Lookup:
        """The cache-hit path: a built-in backend's target is named without scanning plugins
        or loading the native core, and a hit needs neither (a key exists only for options
        that once compiled). With `source_key`, a shortcut names the entry and carries a copy
        of it, so an llvmlite module is not even printed and one file is read. What was
        computed goes on to a miss."""
        found = _Lookup()
        quick = self.registry.resolve_quick(opts.target, opts)
        if quick is None:
            return found
        backend, target = quick
        base: dict[str, Any] | None = None
        if source_key is not None:
            found.shortcut = self._shortcut_id(source_key, opts, backend, target)
            read = self.cache.read_shortcut(found.shortcut)
            if read is not None:
                # The watched tools unchanged (trusted): the key stands without asking the
                # backend.
                record, trusted = read
                if not trusted:
                    base = self.key_base(opts, backend, target)
                if trusted or record.base == digest_json(base):
                    # The shortcut's digest covered the copy up to the end of its first part
                    # (the stage a kernel loads) and its head: with a head, no JSON is parsed.
                    rest = functools.partial(self._rest, found.shortcut, record)
                    kernel = self._head_kernel(
                        found.shortcut, record, opts, backend, target, rest
                    )
                    if kernel is None:
                        entry = decode(record.key, record.entry, verify=False, checked=record.hot)
                        if entry is not None:
                            kernel = self._kernel(
                                entry, record.key, "hit", opts, backend, target, rest
                            )
                    if kernel is not None:
                        found.kernel, found.status = kernel, "hit"
                        # Same tools, touched: watch their new state. Only from a copy whose
                        # other stages are checked now: a new shortcut would digest them
                        # afresh, damage included.
                        if base is not None and rest_checked(record):
                            self._put_shortcut(
                                found.shortcut, record.key, base, opts, backend, target,
                                record.entry,
                            )
                        return found
        if base is None:
            base = self.key_base(opts, backend, target)
        found.ir = _as_ir(src)
        found.key = _key(found.ir, base)
        found.kernel, found.status, raw = self._lookup(found.key, opts, backend, target)
        if found.kernel is not None and found.shortcut is not None and raw is not None:
            self._put_shortcut(found.shortcut, found.key, base, opts, backend, target, raw)
        return found

    def _head_kernel(
        self,
        shortcut: str,
        record: Shortcut,
        opts: CompileOptions,
        backend: Backend,
        target: Target,
        rest: Callable[[], Mapping[str, bytes]],
    ) -> CompiledKernel | None:
        """The kernel from a shortcut's head and the copy's first part, with its metadata
        read on first access; None without a head (the JSON line answers then)."""
        if record.head is None:
            return None
        first, order, text, name, types, names = record.head
        data = first_part(record.entry, record.hot)
        if data is None or first not in order:
            return None
        metadata = functools.partial(self._shortcut_metadata, shortcut, record, backend)
        try:
            asm = CompiledKernel._stages(
                {first: data.decode() if first in text else data}, order, text, rest
            )
            return backend.make_kernel(
                asm, metadata, opts, record.key, "hit", target, settings=self.settings,
                head=(name, types, names),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def _shortcut_metadata(self, shortcut: str, record: Shortcut, backend: Backend) -> Metadata:
        """A hit's metadata, from the JSON line of the shortcut's copy of the entry (which
        its digest covered). Where this tilec cannot make it, the shortcut is removed, so
        that the next compile reads the entry's own file (or builds the kernel again)."""
        entry = decode(record.key, record.entry, verify=False, checked=record.hot)
        try:
            if entry is None:
                raise ValueError("not an entry")
            md: Metadata = backend.metadata_class.from_json(entry.payload["metadata"])
        except (KeyError, TypeError, ValueError) as exc:
            self.cache.drop_shortcut(shortcut)
            raise CacheError(
                f"the cached metadata of kernel {record.key[:12]} cannot be read ({exc}); the "
                f"shortcut was removed: compile the kernel again to rebuild it"
            ) from None
        return md

    def _rest(self, shortcut: str, record: Shortcut) -> Mapping[str, bytes]:
        """The stages a hit through `shortcut` did not check, checked now: from its copy of
        the entry, or from the entry's own file where the copy is damaged."""
        if rest_checked(record):
            entry = decode(record.key, record.entry, verify=False)
            if entry is not None:
                return entry.parts
        self.cache.drop_shortcut(shortcut)
        own, status = self.cache.get(record.key)
        if own is None:
            raise CacheError(
                f"the cached stages of kernel {record.key[:12]} are damaged (their digest does "
                f"not match) and its own cache entry is {status}; the damaged shortcut was "
                f"removed: compile the kernel again to rebuild them"
            )
        return own.parts

    def _shortcut_id(
        self, source_key: str, opts: CompileOptions, backend: Backend, target: Target
    ) -> str:
        """What names a shortcut: everything of the cache key that needs neither the IR nor
        the tools (the settings stand for how the tools are found; the build of tilec, with
        its LLVM version, is watched instead: see _put_shortcut). A repr, not JSON: the
        options and target are frozen dataclasses of strings, numbers and tuples, and one repr
        of the tuple is the cheapest. Their fields' dicts rather than the objects: a
        dataclass's own repr goes through a recursion guard and a generated function, about
        ten microseconds more the first time in a process. The settings' values go in as they are,
        paths as text (a path's repr costs a fresh process microseconds each)."""
        settings: list[Any] = []
        for value in vars(self.settings).values():
            if isinstance(value, PurePath):
                value = str(value)
            elif type(value) is tuple:
                value = tuple(map(str, value))
            settings.append(value)
        ident = (
            CACHE_LAYOUT,
            source_key,
            vars(opts),
            vars(target),
            settings,
            __version__,
            backend.name,
            backend.version,
            type(backend).__qualname__,
        )
        return digest_bytes(repr(ident).encode()).decode()

    def _put_shortcut(
        self,
        shortcut: str,
        key: str,
        base: dict[str, Any],
        opts: CompileOptions,
        backend: Backend,
        target: Target,
        entry: bytes,
    ) -> None:
        watch = backend.tool_watch(target, opts, self.settings)
        if watch is not None:
            watch = [[native.BUILD_INFO, file_state(native.BUILD_INFO)], *watch]
        decoded = decode(key, entry, verify=False)
        head = None
        if decoded is not None and decoded.parts:
            with contextlib.suppress(KeyError, TypeError):
                head = CompiledKernel._head(decoded.payload, next(iter(decoded.parts)))
        self.cache.put_shortcut(shortcut, key, digest_json(base), watch, entry, head)

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

        Pass dumps need a real compile, so `dump_passes` skips reading the cache.
        `source_key`: see `tilec.compile`.
        """
        opts.validate()
        passes = self.settings.dump_passes if dump_passes is None else dump_passes
        out_dir = Path(dump_dir) if dump_dir is not None else self.settings.debug_dump_dir

        found = _Lookup()
        if not passes and self.cache.enabled:
            found = self.lookup(src, opts, source_key)
            hit = found.kernel
            if hit is not None:
                if out_dir is not None:
                    hit.dump(out_dir / f"{hit.name}-{hit.key[:12]}", metadata=True)
                return hit
        ir_src = found.ir if found.ir is not None else _as_ir(src)
        backend, target = self.resolve(opts)
        key = self.cache_key(ir_src, opts, backend, target)
        kernel: CompiledKernel | None = None
        status: Any = found.status
        raw: bytes | None = None
        if not passes and key != found.key:
            kernel, status, raw = self._lookup(key, opts, backend, target)
        if kernel is None:
            md = backend.metadata_class(
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
            raw = self.cache.put(key, *kernel._payload())
        if source_key is not None and raw is not None:
            shortcut = found.shortcut or self._shortcut_id(source_key, opts, backend, target)
            base = self.key_base(opts, backend, target)
            self._put_shortcut(shortcut, key, base, opts, backend, target, raw)
        if out_dir is not None:
            kernel.dump(out_dir / f"{kernel.name}-{key[:12]}", metadata=True)
        return kernel


@dataclass
class _Lookup:
    """What `Compiler.lookup` found, and what it computed on the way."""

    kernel: CompiledKernel | None = None
    status: Any = "miss"
    ir: str | bytes | None = None
    key: str | None = None
    shortcut: str | None = None


def _key(src: str | bytes, base: dict[str, Any]) -> str:
    data = src.encode() if isinstance(src, str) else src
    return digest_json({**base, "ir": hashlib.sha256(data).hexdigest()})


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
