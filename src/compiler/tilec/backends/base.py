"""The backend interface: parse targets, name and produce stages, give the binary and its launcher.

A backend is a `Backend` subclass. tilec has one in tree (`cuda`, NVPTX, in
tilec.backends.cuda); others come from plugins (entry-point group `tilec.backends`,
or TILEC_PLUGIN_DIRS), see tilec.backends.registry. Stages are callables
`(input, StageContext) -> output`, run in order; each output is kept in
`kernel.asm[<stage>]`. A backend with options of its own declares a frozen dataclass
(`options_class`) that `Backend.options` builds from `CompileOptions.backend_options`;
one that records more than `Metadata` declares a subclass (`metadata_class`).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from .. import native
from ..cache.format import digest_json
from ..errors import CompileError, TargetError
from ..kernel import CompiledKernel, CompileOptions, Metadata, Stage, StageContext
from ..launch import Signature
from ..settings import Settings
from ..specialize import c_param_names

__all__ = ["Backend", "Stage", "StageContext", "Target", "front_end", "parse_options"]


@dataclass(frozen=True)
class Target:
    """A parsed target: the backend's name and its arch ("cuda", "sm_90")."""

    backend: str
    arch: str
    features: str = ""  # LLVM subtarget features, e.g. "+ptx80"

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"


class Backend(abc.ABC):
    """One code generator and its runtime.

    Subclasses set the class attributes and implement `parse_target` and `stages`.
    """

    name: ClassVar[str] = ""  # the target prefix: "cuda" in "cuda:90"
    version: ClassVar[str] = "0"  # part of every cache key of this backend's kernels
    description: ClassVar[str] = ""
    binary_stage: ClassVar[str] = ""  # the stage whose output is loaded and run
    binary_format: ClassVar[str] = ""  # e.g. "cubin", "elf-shared-object"
    kernel_class: ClassVar[type[CompiledKernel]] = CompiledKernel  # its launcher
    default_arch: ClassVar[str | None] = None  # used when the target is the bare name
    # A frozen dataclass of the backend's own options (None: it takes none); its
    # `validate()`, if any, raises TargetError naming what is wrong.
    options_class: ClassVar[type[Any] | None] = None
    metadata_class: ClassVar[type[Metadata]] = Metadata  # what a compile records

    @abc.abstractmethod
    def parse_target(self, arch: str, options: CompileOptions) -> Target:
        """`arch` is what follows "<name>:"; raise TargetError naming what is valid."""

    @abc.abstractmethod
    def stages(
        self, target: Target, options: CompileOptions, settings: Settings
    ) -> dict[str, Stage]:
        """The ordered stages for this target; the first one takes the input IR."""

    def options(self, options: CompileOptions) -> Any:
        """This backend's own options, parsed from `options.backend_options` (None when
        it takes none); cheap enough for cache lookups (no native core)."""
        items = options.backend_options
        assert isinstance(items, tuple)  # CompileOptions normalizes it
        # No typing.cast: a Python call, and this runs on every cache hit; classes hash.
        return parse_options(self.name, self.options_class, items)  # type: ignore[arg-type]

    def options_digest(self, options: CompileOptions) -> str | None:
        """The parsed options' identity, part of the cache key: defaults given or left
        out key the same."""
        # Remembered per option values: asdict and the JSON digest are a cache hit's cost.
        items = cast(Hashable, options.backend_options)
        return _options_digest(self.name, cast(Hashable, self.options_class), items)


    def quick_target(self, arch: str, options: CompileOptions) -> Target | None:
        """What `parse_target` would return for a valid `arch`, computed cheaply (no native
        core) for cache lookups, or None when the backend cannot say without parsing."""
        return None

    def cache_key(self, target: Target, options: CompileOptions, settings: Settings) -> Any:
        """Identity of the tools the stages use (JSON-able); part of the cache key."""
        return None

    def tool_watch(
        self, target: Target, options: CompileOptions, settings: Settings
    ) -> list[list[Any]] | None:
        """[path, [mtime_ns, size]] of the files and directories whose state vouches for what
        `cache_key` answered, so that a cache shortcut may skip asking it (see tilec.cache);
        None (the default): no such promise, a shortcut then recomputes the key."""
        return None

    def derived_stages(self, kernel: CompiledKernel) -> dict[str, Callable[[], Any]]:
        """Stages computed on demand from the kernel (e.g. "sass" from "cubin")."""
        return {}

    def make_kernel(
        self,
        asm: Mapping[str, Any],
        metadata: Metadata | Callable[[], Metadata],
        options: CompileOptions,
        key: str,
        status: Any,
        target: Target,
        settings: Settings | None = None,
        head: tuple[str, Sequence[str], Sequence[str]] | None = None,
    ) -> CompiledKernel:
        """The backend's kernel object; `head` and a callable `metadata`: see CompiledKernel."""
        if head is None:  # passed only when given: a plugin's kernel class may not take it
            return self.kernel_class(
                asm, metadata, options, key, status, backend=self, target=target,
                settings=settings,
            )
        return self.kernel_class(
            asm, metadata, options, key, status, backend=self, target=target, settings=settings,
            head=head,
        )

    def __repr__(self) -> str:
        return f"<tilec backend {self.name!r} ({self.binary_format})>"


@functools.lru_cache(maxsize=256)
def _options_digest(backend: str, options_class: Hashable, items: Hashable) -> str | None:
    parsed = parse_options(backend, options_class, cast(tuple[tuple[str, Any], ...], items))
    if parsed is None:
        return None
    fields = dataclasses.asdict(parsed)
    # Options whose effect the backend keys itself, resolved (`Backend.cache_key`): the cuda
    # backend's `assembler`, so that `auto` and the assembler it picks share entries.
    for name in getattr(parsed, "KEYED_BY_BACKEND", ()):
        fields.pop(name, None)
    return digest_json(fields)


@functools.lru_cache(maxsize=256)
def parse_options(
    backend: str, options_class: Hashable, items: tuple[tuple[str, Any], ...]
) -> Any:
    """`options_class(**dict(items))`, validated; unknown names get the list of valid ones."""
    if options_class is None:
        if items:
            raise TargetError(
                f"backend {backend!r} takes no options of its own; got "
                f"{', '.join(name for name, _ in items)}"
            )
        return None
    assert isinstance(options_class, type)
    if items:  # none given (every cache hit with default options): nothing to look up
        known = [f.name for f in dataclasses.fields(options_class) if f.init]
        unknown = [name for name, _ in items if name not in known]
        if unknown:
            raise TargetError(
                f"backend {backend!r} has no option {', '.join(map(repr, unknown))}; "
                f"its options: {', '.join(known) or 'none'}"
            )
    parsed = options_class(**dict(items))
    validate = getattr(parsed, "validate", None)
    if validate is not None:
        validate()
    return parsed


def front_end(src: str | bytes, ctx: StageContext, triple: str, cpu: str, features: str) -> str:
    """The common first stage: parse, verify, choose the kernel, apply the specialization.

    Returns the module's text with `triple`'s data layout. Records the entry point
    (the specialization's name), its signature and C parameter names in the metadata.
    """
    md, opts = ctx.metadata, ctx.options
    with native.NativeModule(src, name="<tilec input>") as mod:
        mod.set_target(cpu, features, triple=triple)
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
        names = kern.param_names or ("",) * len(kern.param_types)
        spec = opts.specialization().resolve(kern.name, kern.param_types, names)
        md.base_kernel = kern.name
        md.base_signature = kern.param_types
        md.base_param_names = c_param_names(names)
        if spec:
            mod.specialize(kern.name, spec.kernel_name, spec.core_constants(), spec.multiples)
            md.name = spec.kernel_name
            md.signature = tuple(spec.types[i] for i in spec.kept)
            md.param_names = tuple(spec.names[i] for i in spec.kept)
            md.specialization = spec.to_json()
        else:
            md.name = kern.name
            md.signature = kern.param_types
            md.param_names = md.base_param_names
            md.specialization = {}
        return mod.to_text()
