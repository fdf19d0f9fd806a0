"""Plan first, then execute: the steps of a job, each with the digest of its own inputs.

Planning is pure: it reads the recipes, the cache and earlier records to decide each step's
state, and runs nothing (no fetch, no prune, no download). Resolving inputs (fetch, the
wheelhouse, prune) are steps like the build. A step is `done` when a finished, intact result
for the same inputs digest exists, `skip` when the job does not need it (with the reason),
`run` otherwise; `pull` is the state of a step satisfied from elsewhere: a substitute
(plan/substitute.py, given by the command) that holds an image under the build's inputs tag.
Asking for that tag is the one thing planning sends over the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hermetic.attest.attach import attest_image, attest_wheel
from hermetic.build import compile_cache, distribute, wheel
from hermetic.build.llvm import BuildStep
from hermetic.core import platforms
from hermetic.core.errors import RegistryError
from hermetic.model import recipe, record, toolchains, wheels
from hermetic.model.requirements import load_requirements
from hermetic.oci.image import kept_image, spec_from_record, write_image
from hermetic.plan.context import Context, Decision, Refused, Source, State, Step, digest
from hermetic.plan.resolve import FetchStep, PruneStep, ToolchainStep, WheelhouseStep

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings
    from hermetic.plan.context import Substitutes

# the states by name, as the plan's users compare them
RUN, DONE, SKIP, PULL = State.RUN, State.DONE, State.SKIP, State.PULL


@dataclass(frozen=True)
class Planned:
    """A step as planned: what the plan shows, and the step that runs it."""

    key: str
    name: str  # as shown, e.g. "build llvm-nvptx"
    inputs_digest: str
    state: State
    detail: str  # what it does, or why it is done or skipped
    step: Step = field(compare=False, repr=False)


@dataclass(frozen=True)
class Plan:
    variant: str
    steps: tuple[Planned, ...]
    build_path: str  # WORK_DIR/<build_path>: Recipe.build_path, e.g. llvm/support
    ctx: Context = field(compare=False, repr=False)
    deferred: tuple[Planned, ...] = ()  # resolving steps a pull made unneeded: run if the substitute is refused

    @property
    def build(self) -> str:
        return self.build_path

    def upto(self, key: str) -> Plan:
        """The plan narrowed to the steps a job ending at `key` needs."""
        keys = [s.key for s in self.steps]
        return Plan(self.variant, self.steps[: keys.index(key) + 1], self.build_path, self.ctx, self.deferred)

    def step(self, key: str) -> Planned:
        return next(s for s in self.steps if s.key == key)

    def render(self) -> str:
        lines = ["plan:"]
        for i, s in enumerate(self.steps, 1):
            lines.append(f"  {i}. [{s.state:<4}] {s.name:<22} inputs {s.inputs_digest[:16]}  {s.detail}")
        return "\n".join(lines)


class ImageStep:
    """The OCI layout of the tree, rewritten each time (deterministic, seconds) and attested; the very image a
    substitution pulled is kept instead (its digest is the one published, its attestations were made where
    it was built)."""

    key = "image"

    def name(self, ctx: Context) -> str:
        return f"image {ctx.title}"

    def inputs_digest(self, ctx: Context) -> str:
        return digest("image", BuildStep().inputs_digest(ctx), "gzip")

    def plan(self, ctx: Context) -> Decision:
        if "substitute" in ctx.outputs:
            return Decision(PULL, f"the substitute's layout, kept by the pull, under {ctx.image_dir}")
        return Decision(RUN, f"OCI layout under {ctx.image_dir}")

    def run(self, ctx: Context) -> None:
        spec = spec_from_record(ctx.record_json)
        kept = kept_image(record.load_build_record(ctx.record_json), ctx.image_dir / spec.name, "gzip")
        if kept is not None:
            ctx.log(f"image: {spec.name} {kept.digest} -> {ctx.image_dir / spec.name} (pulled from the substitute, kept)")
            return
        result = write_image(spec, ctx.image_dir / spec.name)
        ctx.log(f"image: {result.name} {result.manifest.digest} -> {result.layout}")
        attest_image(ctx.settings, result.layout, ctx.record_json)
        ctx.log(f"image: SBOM and provenance attached as referrers of {result.manifest.digest}")


class WheelStep:
    """The wheel recipes that build against this tree (the compiler core lowers to PTX: a variant without NVPTX
    cannot host it; a third-party recipe names its release and variant), each with its SBOM and provenance."""

    key = "wheel"

    def name(self, ctx: Context) -> str:
        names = ", ".join(f"{w.sdist.name} {w.sdist.version}" if w.sdist else w.project for w in ctx.wheel_recipes)
        return f"wheel {names or '(none)'}"

    def inputs_digest(self, ctx: Context) -> str:
        return digest("wheel", BuildStep().inputs_digest(ctx), *(w.digest() for w in ctx.wheel_recipes),
                      *(r.digest() for r in ctx.requirements))

    def plan(self, ctx: Context) -> Decision:
        if not ctx.wheel_recipes:
            why = "; ".join(ctx.not_fit) or "there are none"
            return Decision(SKIP, f"no wheel recipe builds against {ctx.variant.name} of LLVM {ctx.recipe.version}: {why}")
        if ctx.cross:
            return Decision(SKIP, f"no {ctx.arch} wheel here: `hermetic wheel --arch {ctx.arch} --python ROOT/…` builds it")
        made = "; ".join(f"{w.sdist.file} (sha256 {w.sdist.sha256[:12]}…)" if w.sdist else w.project
                         for w in ctx.wheel_recipes)
        return Decision(RUN, f"{made} against {ctx.recipe.prefix(ctx.variant.name)}, offline")

    def run(self, ctx: Context) -> None:
        for w in ctx.wheel_recipes:
            # planned at run time: the LLVM prefix it checks exists only once the build step ran
            job = wheel.plan(ctx.settings, None, ctx.prefix_dir, None, None, recipe_name=w.name, log=ctx.log)
            rec = wheel.build_wheel(ctx.settings, job, ctx.log)
            sbom, prov = attest_wheel(ctx.settings, job.output / rec.wheel)
            ctx.log(f"wheel: SBOM {sbom.name}, provenance {prov.name}")


def context(
    settings: Settings, log: Log, source: str = "pruned", *, variant_name: str | None = None,
    overrides: dict[str, str] | None = None, force: bool = False, keep_build: bool = False,
    substitutes: Substitutes | None = None,
) -> Context:
    """A job's inputs, resolved once: the recipe and variant, the toolchain, the source, the wheel recipes."""
    rec = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
    variant = recipe.resolve_variant(rec, variant_name or settings.variant, overrides)
    arch = settings.arch or platforms.machine_arch()
    tc = toolchains.select(toolchains.load(settings.toolchain_dir), settings.toolchain, settings.glibc, platforms.zig_arch(arch))
    if settings.compile_cache:
        # refused before anything runs: a TCP cache cannot be reached from the build's network namespace
        compile_cache.check_reachable(settings.compile_cache, settings.offline)
        # and one this user may not use (permissions stay wrong, unlike a cache that is down)
        compile_cache.check_access(settings.compile_cache)
    if settings.distribute:
        distribute.check_usable(settings.distribute, tc)
    fit, not_fit = wheels.matching_recipes(settings.recipes_dir, rec.version, rec.default_version, variant.name,
                                           tuple(variant.values("targets")), arch)
    reqs = [load_requirements(f) for f in wheels.requirement_files(settings, fit)]
    return Context(settings, log, rec, variant, tc, arch, arch != platforms.machine_arch(), Source.parse(source),
                   fit, not_fit, reqs, force, keep_build, substitutes)


def plan_all(settings: Settings, log: Log, source: str = "pruned", *, through: str = "wheel",
             variant_name: str | None = None, overrides: dict[str, str] | None = None, force: bool = False,
             keep_build: bool = False, substitutes: Substitutes | None = None) -> Plan:
    """The main job: toolchain, fetch, wheelhouse, prune, build, image, wheel; narrowed to the steps up to `through`.

    `substitutes`: where the build may be pulled from instead (plan/substitute.Finder); None asks nobody.
    """
    ctx = context(settings, log, source, variant_name=variant_name, overrides=overrides, force=force,
                  keep_build=keep_build, substitutes=substitutes)
    steps: list[Step] = [ToolchainStep(), FetchStep(), WheelhouseStep(), PruneStep(), BuildStep(), ImageStep(),
                         WheelStep()]
    planned = [_planned(s, ctx) for s in steps]
    by_key = {p.key: p for p in planned}
    # Resolving steps no later step of this job needs are skipped: a pulled or finished tree needs no
    # source, and only a build or a wheel that runs needs the compiler and the wheelhouse.
    keys = [p.key for p in planned]
    builds = by_key["build"].state == RUN
    pulled = by_key["build"].state == PULL
    wheels_run = keys.index(through) >= keys.index("wheel") and by_key["wheel"].state == RUN
    # the release archive only feeds a prune that runs (or a build of the whole release)
    fetches = builds and (ctx.source.mode != "pruned" or by_key["prune"].state == RUN)
    needed = {"toolchain": builds or wheels_run, "fetch": fetches, "wheelhouse": builds or wheels_run, "prune": builds}
    reason = f"not needed: build {ctx.title} is {'pulled' if pulled else 'up to date'}"
    deferred = []
    for i, p in enumerate(planned[:4]):
        if not needed[p.key] and p.state != SKIP:
            detail = reason if not builds else "not needed: the pruned source is cached"
            planned[i] = Planned(p.key, p.name, p.inputs_digest, SKIP, detail, p.step)
            if pulled:
                deferred.append(p)
    return Plan(ctx.variant.name, tuple(planned), ctx.build_path, ctx, tuple(deferred)).upto(through)


def _planned(step: Step, ctx: Context) -> Planned:
    decision = step.plan(ctx)
    return Planned(step.key, step.name(ctx), step.inputs_digest(ctx), decision.state, decision.detail, step)


def execute(plan: Plan, log: Log) -> None:
    """Run the plan's steps that run or pull, in order; each leaves its output in the context for the next."""
    ctx = plan.ctx
    for p in plan.steps:
        if p.state == RUN:
            log(f"==> {p.name}")
            ctx.outputs[p.key] = p.step.run(ctx)
        elif p.state == PULL:
            log(f"==> {p.name} (pull)")
            ctx.outputs[p.key] = _pull(plan, p, log) if isinstance(p.step, BuildStep) else p.step.run(ctx)


def _pull(plan: Plan, p: Planned, log: Log) -> record.BuildRecord:
    """The substitute's build; when it is refused (or fails mid-pull), the skipped resolving steps, then the build."""
    step, ctx = p.step, plan.ctx
    assert isinstance(step, BuildStep)
    try:
        return step.pull(ctx)
    except Refused as exc:
        refused = exc.what
    except RegistryError as exc:  # unreachable or failing mid-pull: not this build's problem
        refused = f"substitute {ctx.outputs['substitute'].ref} failed: {exc.what}" + (f" ({exc.why})" if exc.why else "")
    log(f"warning: {refused}; building instead")
    for d in plan.deferred:
        log(f"==> {d.name}")
        ctx.outputs[d.key] = d.step.run(ctx)
    return step.run(ctx, refused)
