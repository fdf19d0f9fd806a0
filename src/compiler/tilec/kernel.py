"""What a compile produces, independent of the backend: options, metadata, stages, the kernel.

Backends (tilec.backends) subclass `CompiledKernel` to launch their binary; this
module knows nothing about CUDA or any other runtime.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from .cache.format import Status, digest_json
from .errors import BackendError, TargetError, ToolNotFoundError
from .launch import Dim3, Signature, launch_config
from .native import PassDump
from .settings import Settings
from .specialize import Constant, ParamRef, Specialization

if TYPE_CHECKING:
    from .backends.base import Backend, Target

__version__ = "0.1.0"
_M = TypeVar("_M", bound="Metadata")


def _frozen(value: Any) -> Any:
    """Lists (from JSON or a caller) as tuples, so that options stay hashable."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class CompileOptions:
    """What every backend takes; a backend's own options ride in `backend_options`.

    `backend_options` maps option names to values (`ptx_version=80`, `ftz=True` for
    cuda); the backend parses them into its `options_class` (see Backend.options),
    which refuses names it does not know.
    """

    target: str = "sm_90"  # "cuda:90", "sm_90", "cpu:x86-64", "<plugin>:<arch>"
    opt_level: int = 3
    kernel: str | None = None  # entry point; None: the module's only kernel
    # Specialization: parameters (by name or index) fixed at compile time, and
    # integer parameters the kernel may assume to be multiples of k.
    constants: tuple[tuple[ParamRef, Constant], ...] = ()
    multiple_of: tuple[tuple[ParamRef, int], ...] = ()
    backend_options: Mapping[str, Any] | tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        raw = self.backend_options
        if not raw:
            # The common case, kept cheap: isinstance(raw, Mapping) is an ABC check, tens
            # of microseconds the first time in a process, and this runs on every cache hit.
            object.__setattr__(self, "backend_options", ())
            return
        items = raw.items() if isinstance(raw, Mapping) else raw
        normalized = tuple(sorted((str(k), _frozen(v)) for k, v in items))
        try:
            hash(normalized)
        except TypeError:
            raise TargetError(
                f"backend options take numbers, strings, bools and sequences of them, got "
                f"{dict(normalized)!r}"
            ) from None
        object.__setattr__(self, "backend_options", normalized)

    def validate(self) -> None:
        """Backend-independent checks; the backend checks the target and its own options."""
        if self.opt_level not in (0, 1, 2, 3):
            raise TargetError(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")

    @property
    def extra(self) -> dict[str, Any]:
        """`backend_options` as a dict."""
        return dict(self.backend_options)

    def specialization(self) -> Specialization:
        return Specialization(self.constants, self.multiple_of)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["backend_options"] = self.extra
        return out

    def digest(self) -> str:
        """The backend-independent options; the backend keys its own in parsed form."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "backend_options"}
        return digest_json(out)


@dataclass
class Metadata:
    """What every backend records; a backend with more subclasses it (`metadata_class`)."""

    name: str  # the entry point (a specialization's own name)
    target: str  # the backend's arch, e.g. "sm_90" or "x86-64"
    signature: tuple[str, ...]  # LLVM types of the entry point's parameters
    llvm_version: str
    tilec_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)
    backend: str = ""
    param_names: tuple[str, ...] = ()  # C names of the entry point's parameters
    base_kernel: str = ""  # the kernel the specialization was made from
    base_signature: tuple[str, ...] = ()
    base_param_names: tuple[str, ...] = ()
    specialization: dict[str, Any] = field(default_factory=dict)
    TUPLE_FIELDS: ClassVar[tuple[str, ...]] = (
        "signature", "param_names", "base_signature", "base_param_names"
    )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls: type[_M], raw: Mapping[str, Any]) -> _M:
        """The metadata `to_json` wrote. Its keys are this class's fields (the cache key holds
        tilec's and the backend's versions): any other key is a TypeError, and the entry is
        then rebuilt."""
        values = dict(raw)
        # JSON has no tuples: restore them where the field holds one.
        for name in tuple_fields(cls):
            value = values.get(name)
            if type(value) is list:
                values[name] = tuple(value)
        return cls(**values)


def tuple_fields(cls: type[Metadata]) -> tuple[str, ...]:
    """The names of `cls`'s fields that hold a tuple: its own `TUPLE_FIELDS` where it declares
    them (in its class body), else found from its fields once."""
    declared: tuple[str, ...] | None = cls.__dict__.get("TUPLE_FIELDS")
    return declared if declared is not None else _tuple_fields(cls)  # type: ignore[arg-type]


@functools.cache
def _tuple_fields(cls: type[Metadata]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if "tuple" in str(f.type))


@dataclass
class StageContext:
    """What a stage may read and record besides its input."""

    settings: Settings
    target: Target
    options: CompileOptions
    metadata: Metadata
    dump_passes: bool = False
    passes: list[PassDump] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)  # earlier stages' outputs, by name


Stage = Callable[[Any, StageContext], Any]


class Stages(Mapping[str, Any]):
    """The stages a compile produced, in order; `derived` ones (e.g. "sass") on first access.

    Iteration, `in`, `get` and equality see the produced stages only; `stages["sass"]`
    runs the disassembler once and raises ToolNotFoundError when there is none.

    A cache hit through a shortcut checks only the bytes it needs to launch (the last
    stage); the others come from `load` on first access, which checks their digest then.
    """

    def __init__(
        self,
        produced: Mapping[str, Any],
        derived: Mapping[str, Callable[[], Any]] | None = None,
        *,
        order: tuple[str, ...] | None = None,
        load: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self._values = dict(produced)
        self._order = tuple(self._values) if order is None else order
        self._load = load
        self._derived = dict(derived or {})
        self._computed: dict[str, Any] = {}

    @property
    def derived(self) -> tuple[str, ...]:
        return tuple(self._derived)

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._order else default

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            pass
        if key in self._order:
            if self._load is not None:
                self._values.update(self._load())
                self._load = None
            return self._values[key]
        if key not in self._derived:
            raise KeyError(
                f"no stage {key!r}; stages: {', '.join(self._order) or 'none'}"
                + (f"; on demand: {', '.join(self._derived)}" if self._derived else "")
            )
        if key not in self._computed:
            self._computed[key] = self._derived[key]()
        return self._computed[key]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]  # a mapping of mutable stages, as a dict

    def __repr__(self) -> str:
        return f"Stages({list(self._order)!r})"


def _exact_dims(value: Any) -> bool:
    # A plain loop: a generator in all() costs more than the rest of a remembered k[grid, block].
    kind = type(value)
    if kind is int:
        return True
    if kind is not tuple:
        return False
    for d in value:  # noqa: SIM110 (see above)
        if type(d) is not int:
            return False
    return True


class _Launcher:
    def __init__(self, kernel: CompiledKernel, grid: Dim3, block: Dim3) -> None:
        self.kernel = kernel
        self.grid, self.block = grid, block

    def __call__(self, *args: Any, stream: Any = None, shared_mem: int = 0) -> None:
        self.kernel.launch(self.grid, self.block, args, stream=stream, shared_mem=shared_mem)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80] or "kernel"


class CompiledKernel:
    """Stages (`asm`), metadata, and a launcher: `kernel[grid, block](*args)`.

    The backend's subclass loads and launches the binary; `close()` (or `with`)
    releases what it loaded.

    `head` (the kernel's name, parameter types and names): what the kernel needs from its
    metadata before the metadata itself, which `metadata` then makes on first access. A hit
    through a cache shortcut gives both, so that it parses no JSON (tilec.cache.store).
    """

    def __init__(
        self,
        asm: Mapping[str, Any],
        metadata: Metadata | Callable[[], Metadata],
        options: CompileOptions,
        key: str,
        cache_status: Status,
        *,
        backend: Backend | None = None,
        target: Target | None = None,
        settings: Settings | None = None,
        head: tuple[str, Sequence[str], Sequence[str]] | None = None,
    ) -> None:
        self.backend = backend
        self.target = target
        self.settings = settings
        self.options = options
        self.key = key
        self.cache_status: Status = cache_status
        self._metadata: Metadata | None = None
        self._make_metadata: Callable[[], Metadata] | None = None
        if head is None:  # made already, as always before heads (a plugin's may be duck-typed)
            made = cast(Metadata, metadata)
            self._metadata = made
            head = (made.name, made.signature, made.param_names)
        else:
            self._make_metadata = cast(Callable[[], Metadata], metadata)
        self.name = head[0]
        self.signature = Signature.from_llvm(*head)
        self._configs: dict[tuple[Any, Any], Callable[..., None]] = {}
        self.passes: tuple[PassDump, ...] = ()  # filled when pass dumps were asked for
        self.asm: Stages = asm if isinstance(asm, Stages) else Stages(asm)
        if backend is not None:
            self.asm._derived.update(backend.derived_stages(self))

    @property
    def metadata(self) -> Metadata:
        md = self._metadata
        if md is None:
            assert self._make_metadata is not None
            md = self._metadata = self._make_metadata()
            self._make_metadata = None
            self._metadata_made(md)
        return md

    def _metadata_made(self, metadata: Metadata) -> None:
        """Called once, when metadata made on first access exists: a backend's kernel fills in
        what it learned before (e.g. from the loaded binary)."""

    # -- inspection ---------------------------------------------------------------
    def stage_files(self) -> Iterator[tuple[str, str | bytes]]:
        """(file name, content) of every stage, derived ones where their tool exists."""
        for stage, value in self.asm.items():
            yield f"{self.name}.{stage}", value
        for stage in self.asm.derived:
            try:
                value = self.asm[stage]
            except ToolNotFoundError:
                continue
            yield f"{self.name}.{stage}", value

    def dump(self, directory: str | Path, *, metadata: bool = False) -> list[Path]:
        """Write every stage to `directory`: kernel.llir, kernel.ptx, kernel.cubin, kernel.sass...

        With pass dumps (`dump_passes=True` / TILEC_DUMP_PASSES=1), the IR after each
        LLVM pass goes to `<kernel>.passes/NNNN-<pass>-<unit>.ll`.
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        for fname, value in self.stage_files():
            path = out / fname
            if isinstance(value, bytes):
                path.write_bytes(value)
            else:
                path.write_text(value)
            written.append(path)
        if self.passes:
            pdir = out / f"{self.name}.passes"
            pdir.mkdir(exist_ok=True)
            for i, p in enumerate(self.passes):
                path = pdir / f"{i:04d}-{_safe(p.pass_name)}-{_safe(p.unit)}.ll"
                path.write_text(f"; IR after {p.pass_name} on {p.unit}\n{p.ir}")
                written.append(path)
        if metadata:
            path = out / f"{self.name}.json"
            info = {
                "key": self.key,
                "target": str(self.target) if self.target is not None else self.options.target,
                "options": self.options.to_json(),
                "metadata": self.metadata.to_json(),
            }
            path.write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")
            written.append(path)
        return written

    # -- runtime --------------------------------------------------------------------
    def __getitem__(self, config: tuple[Any, Any]) -> Callable[..., None]:
        # A launch loop asks for the same configuration again and again: check it once. Only
        # exact ints are remembered, since 1.0 and True hash like 1 and must still be refused.
        # The common case, two ints, is told apart in a few bytecodes.
        if (
            type(config) is tuple
            and len(config) == 2
            and type(config[0]) is int
            and type(config[1]) is int
        ):
            exact = True
        elif not isinstance(config, tuple) or len(config) != 2:
            raise TypeError("launch as kernel[grid, block](*args)")
        else:
            exact = _exact_dims(config[0]) and _exact_dims(config[1])
        if exact:
            known = self._configs.get(config)
            if known is not None:
                return known
        grid, block = config
        launcher = self._make_launcher(*launch_config(grid, block))
        if exact:
            if len(self._configs) >= 256:  # a kernel launched on ever-new grids: stay small
                self._configs.clear()
            self._configs[config] = launcher
        return launcher

    def _make_launcher(self, grid: Dim3, block: Dim3) -> Callable[..., None]:
        """What `kernel[grid, block]` returns for a checked configuration; backends with a
        faster launch path override it."""
        return _Launcher(self, grid, block)

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        stream: Any = None,
        shared_mem: int = 0,
    ) -> None:
        name = self.backend.name if self.backend is not None else "none"
        raise BackendError(f"backend {name!r} gives kernels no launcher")

    def close(self) -> None:
        """Release what launching loaded (nothing here; backends override)."""

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
        target = str(self.target) if self.target is not None else self.options.target
        return f"<CompiledKernel {self.signature} {target} stages={list(self.asm)}>"
