"""The steps that resolve a build's inputs: the pinned compiler, the release archive, the wheelhouse, the pruned
source. Each decides from the cache alone (planning fetches nothing) and leaves what it found or made in
`ctx.outputs` under its key, where the build step takes it: inputs are resolved once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermetic.fetch import prune, sources, toolchain
from hermetic.fetch.wheelhouse import fetch_wheelhouses
from hermetic.model import requirements
from hermetic.plan.context import Decision, State, digest

if TYPE_CHECKING:
    from pathlib import Path

    from hermetic.model.settings import Settings
    from hermetic.plan.context import Context


class ToolchainStep:
    """The pinned compiler, fetched, verified and unpacked (the host's compiler is not fetched)."""

    key = "toolchain"

    def name(self, ctx: Context) -> str:
        return f"toolchain {ctx.toolchain.name}"

    def inputs_digest(self, ctx: Context) -> str:
        return digest("toolchain", ctx.toolchain.identity())

    def plan(self, ctx: Context) -> Decision:
        tc = ctx.toolchain
        if tc.kind == "host":
            return Decision(State.SKIP, "the machine's compiler: digests hold only on this distribution")
        hit = toolchain.unpacked(ctx.settings.cache_dir, tc)
        if hit:
            return Decision(State.DONE, f"{tc.label}: cached in {hit}")
        return Decision(State.RUN, f"{tc.label}: {tc.package} wheel {_origins(ctx.settings, 'PyPI (pip download)')}")

    def run(self, ctx: Context) -> Path | None:
        s = ctx.settings
        return toolchain.ensure(s.cache_dir, ctx.toolchain, s.mirrors, s.use_urls, ctx.log)


class FetchStep:
    """The release archive, by its pinned digest."""

    key = "fetch"

    def name(self, ctx: Context) -> str:
        return "fetch source"

    def inputs_digest(self, ctx: Context) -> str:
        return digest(sorted(a.sha256 for a in ctx.recipe.archives))

    def plan(self, ctx: Context) -> Decision:
        if ctx.source.mode == "path":
            return Decision(State.SKIP, f"--source {ctx.source.path} is used instead")
        hit = sources.cached(ctx.settings.cache_dir, ctx.recipe)
        if hit:
            ctx.outputs[self.key] = hit  # verified just now: the prune and the build take it from here
            return Decision(State.DONE, f"cached: {hit.archive.file} ({hit.origin})")
        return Decision(State.RUN, _origins(ctx.settings, "URLs", apt=True))

    def run(self, ctx: Context) -> sources.CachedArchive:
        return sources.fetch_with(ctx.settings, ctx.recipe, ctx.log)


class WheelhouseStep:
    """The hash-pinned build requirements: CMake and Ninja of the build, the wheels' too."""

    key = "wheelhouse"

    def name(self, ctx: Context) -> str:
        return "fetch wheelhouse"

    def inputs_digest(self, ctx: Context) -> str:
        sets = ctx.requirements
        return digest(*(r.digest() for r in sets)) if len(sets) > 1 else sets[0].digest()

    def plan(self, ctx: Context) -> Decision:
        house = ctx.settings.wheelhouse_dir
        missing = [m for r in ctx.requirements for m in requirements.check_wheelhouse(house, r).missing]
        if missing:
            pinned = sum(len(r.items) for r in ctx.requirements)
            return Decision(State.RUN, f"{len(missing)} of {pinned} pinned wheels missing")
        return Decision(State.DONE, f"complete in {house}")

    def run(self, ctx: Context) -> Path:
        return fetch_wheelhouses(ctx.settings, ctx.log, ctx.wheel_recipes)


class PruneStep:
    """The variant's deterministic subset of the release."""

    key = "prune"

    def name(self, ctx: Context) -> str:
        return "prune source"

    def inputs_digest(self, ctx: Context) -> str:
        rec, variant = ctx.recipe, ctx.variant
        pins = sorted(a.sha256 for a in rec.archives)
        return digest("prune", prune.PRUNE_RULES_VERSION, rec.prune.as_json(), pins, variant.values("targets"),
                      variant.values("projects"))

    def plan(self, ctx: Context) -> Decision:
        if ctx.source.mode != "pruned":
            return Decision(State.SKIP, f"--source {ctx.source.shown} builds without pruning")
        cached = prune.pruned_in_cache(ctx.settings.cache_dir, ctx.recipe, ctx.variant, ctx.release_archives())
        if cached:
            return Decision(State.DONE, f"cached: {cached.name}")
        return Decision(State.RUN, f"{ctx.variant.name} subset of {ctx.recipe.name} {ctx.recipe.version}")

    def run(self, ctx: Context) -> dict[str, Any]:
        src = ctx.outputs.get(FetchStep.key) or sources.fetch_with(ctx.settings, ctx.recipe, ctx.log)
        ctx.outputs[FetchStep.key] = src
        return prune.ensure_pruned(ctx.settings.cache_dir, ctx.recipe, src, ctx.variant, ctx.log)


def _origins(settings: Settings, urls: str, apt: bool = False) -> str:
    allowed = [f"{len(settings.mirrors)} mirror dir(s)"] if settings.mirrors else []
    allowed += [urls] if settings.use_urls else []
    allowed += ["apt"] if apt and settings.use_apt else []
    return "from " + (", ".join(allowed) if allowed else "nowhere: all origins are off")
