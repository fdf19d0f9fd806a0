"""A job's steps and what they share: each step decides its State from the Context, then runs on it.

A step is a small class: `plan(ctx)` reads the cache and earlier records and returns a Decision (run, done,
skip or pull, with why); `run(ctx)` does the work and leaves what it made in `ctx.outputs` for the steps
after it. The Context carries the inputs resolved once (recipe, variant, toolchain, source, the wheel
recipes) and where they come from (the settings' cache, mirrors, URLs and apt, and the substitutes).
`hermetic all`, `build llvm` and `verify` run the same steps, each with a context of its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hermetic.core.digests import file_sha256
from hermetic.core.errors import HermeticError, SourceError, VerifyError

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.recipe import Archive, Recipe, Variant
    from hermetic.model.record import BuildRecord
    from hermetic.model.requirements import Requirements
    from hermetic.model.settings import Settings
    from hermetic.model.toolchains import Toolchain
    from hermetic.model.wheels import WheelRecipe


class State(StrEnum):
    """What a step does in this job (a str, so plans compare with and print as the words)."""

    RUN = "run"  # its result is not there yet: it runs
    DONE = "done"  # a finished, intact result for the same inputs is there
    SKIP = "skip"  # the job does not need it (the detail says why)
    PULL = "pull"  # a substitute holds its result: pulled and verified instead of made


@dataclass(frozen=True)
class Decision:
    state: State
    detail: str  # what the step does, or why it is done or skipped


class Step(Protocol):
    key: str  # toolchain | fetch | wheelhouse | prune | build | image | wheel

    def name(self, ctx: Context) -> str: ...

    def inputs_digest(self, ctx: Context) -> str: ...

    def plan(self, ctx: Context) -> Decision: ...

    def run(self, ctx: Context) -> object: ...


class SubstituteHit(Protocol):
    @property
    def ref(self) -> str: ...  # REGISTRY/REPO@DIGEST, as the plan line names it

    @property
    def tag(self) -> str: ...


class Substitutes(Protocol):
    """Registries that may hold the finished build (plan/substitute.py); given to a job by its command."""

    def find(self, inputs_digest: str, log: Log) -> SubstituteHit | None: ...

    def install(self, hit: Any, ctx: Context, inputs_digest: str) -> BuildRecord:  # hit: what find() returned
        """Pull, verify and swap in the build; raises Refused (with what to tell the user) when it may not be used."""
        ...


class Refused(HermeticError):
    """A substitute was found but is not used (its provenance, record or blobs do not hold up): what disagreed,
    on one line. The job warns and builds instead."""

    exit_code = VerifyError.exit_code


@dataclass(frozen=True)
class Source:
    """The source of a build: `pruned` (default), `full` (the whole release), or an archive named by path."""

    mode: str
    path: Path | None = None
    sha256: str = ""  # a path's; the recipe pins the others

    @property
    def shown(self) -> str:
        return str(self.path) if self.path else self.mode

    @classmethod
    def parse(cls, text: str) -> Source:
        """`--source`: pruned, full, or the path of an archive (which must exist: its digest is an input)."""
        if text in ("pruned", "full"):
            return cls(text)
        path = Path(text).resolve()
        if not path.is_file():
            raise SourceError(f"source archive {path} does not exist", "", "pass an existing .tar.xz, or pruned / full")
        return cls("path", path, file_sha256(path))


@dataclass
class Context:
    """One job's resolved inputs, shared by its steps; `outputs` holds what each step found or made, by key."""

    settings: Settings
    log: Log
    recipe: Recipe
    variant: Variant
    toolchain: Toolchain
    arch: str
    cross: bool
    source: Source
    wheel_recipes: list[WheelRecipe] = field(default_factory=list)
    not_fit: list[str] = field(default_factory=list)  # why each other wheel recipe does not build against this tree
    requirements: list[Requirements] = field(default_factory=list)
    force: bool = False
    keep_build: bool = False
    substitutes: Substitutes | None = None
    outputs: dict[str, Any] = field(default_factory=dict)

    def release_archives(self) -> list[Archive]:
        """The releases whose pruned subset would do: the cached release's (what a fetch then a prune would pick,
        and what the record names), else either pinned one (a bundle carries the pruned source, not the release)."""
        hit = self.outputs.get("fetch")
        return [hit.archive] if hit is not None else list(self.recipe.archives)

    @property
    def title(self) -> str:
        """What the plan's lines call the build: llvm-support."""
        return f"{self.recipe.name}-{self.variant.name}"

    @property
    def build_path(self) -> str:
        return self.recipe.build_path(self.variant.name)

    @property
    def build_dir(self) -> Path:
        return self.settings.work_dir / self.build_path

    @property
    def record_json(self) -> Path:
        return self.build_dir / "record.json"

    @property
    def image_dir(self) -> Path:
        return self.settings.work_dir / "images"

    @property
    def prefix_dir(self) -> Path:
        """Where the build's tree is installed on this machine: WORK/<build>/install/usr/lib64/…"""
        return self.build_dir / "install" / self.recipe.prefix(self.variant.name).lstrip("/")


def digest(*parts: object) -> str:
    """A step's inputs digest: sha256 of its parts as canonical JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
