"""Plan first, then execute: the steps of a job, each with the digest of its own inputs.

Planning is pure: it reads the recipes, the cache and earlier records to decide each step's
state, and runs nothing (no fetch, no prune, no download). Resolving inputs (fetch, the
wheelhouse, prune) are steps like the build. A step is `done` when a finished, intact result
for the same inputs digest exists, `skip` when the job does not need it (with the reason),
`run` otherwise; `pull` is the state of a step satisfied from elsewhere: a substitute
(substitute.py) that holds an image under the build's inputs tag. Asking for that tag is the one
thing planning sends over the network, and only when substitutes are configured.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.build import compile_cache, distribute, llvm, wheel
from hermetic.core import platforms
from hermetic.core.digests import file_sha256
from hermetic.core.errors import HermeticError, RegistryError, SourceError
from hermetic.fetch import prune, sources, toolchain
from hermetic.model import recipe, requirements, toolchains
from hermetic.plan import steps, substitute

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings

RUN, DONE, SKIP, PULL = "run", "done", "skip", "pull"


@dataclass(frozen=True)
class Step:
    key: str  # toolchain | fetch | wheelhouse | prune | build | image | wheel
    name: str  # as shown, e.g. "build llvm-nvptx"
    inputs_digest: str
    state: str
    detail: str  # what it does, or why it is done or skipped
    action: Callable[[], object] = field(compare=False, repr=False)


@dataclass(frozen=True)
class Plan:
    variant: str
    steps: tuple[Step, ...]
    build_path: str  # WORK_DIR/<build_path>: Recipe.build_path, e.g. llvm/support

    @property
    def build(self) -> str:
        return self.build_path

    def upto(self, key: str) -> Plan:
        """The plan narrowed to the steps a job ending at `key` needs."""
        keys = [s.key for s in self.steps]
        return Plan(self.variant, self.steps[: keys.index(key) + 1], self.build_path)

    def step(self, key: str) -> Step:
        return next(s for s in self.steps if s.key == key)

    def render(self) -> str:
        lines = ["plan:"]
        for i, s in enumerate(self.steps, 1):
            lines.append(f"  {i}. [{s.state:<4}] {s.name:<22} inputs {s.inputs_digest[:16]}  {s.detail}")
        return "\n".join(lines)


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def plan_all(
    settings: Settings,
    log: Log,
    source: str = "pruned",
    *,
    variant_name: str | None = None,
    overrides: dict[str, str] | None = None,
    force: bool = False,
    keep_build: bool = False,
    through: str = "wheel",
    environ: Mapping[str, str] | None = None,
) -> Plan:
    """The main job: toolchain, fetch, wheelhouse, prune, build, image, wheel; narrowed to the steps up to `through`.

    `environ` is where a substitute's credentials come from (the CLI's environment; oci/auth.py reads it).
    """
    rec = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
    variant = recipe.resolve_variant(rec, variant_name or settings.variant, overrides)
    title = f"{rec.name}-{variant.name}"  # what the plan's lines call the build: llvm-support
    arch = settings.arch or platforms.machine_arch()
    tc = toolchains.select(toolchains.load(settings.toolchain_dir), settings.toolchain, settings.glibc, platforms.zig_arch(arch))
    cross = arch != platforms.machine_arch()
    if settings.compile_cache:
        # refused before anything runs: a TCP cache cannot be reached from the build's network namespace
        compile_cache.check_reachable(settings.compile_cache, settings.offline)
        # and one this user may not use (permissions stay wrong, unlike a cache that is down)
        compile_cache.check_access(settings.compile_cache)
    if settings.distribute:
        distribute.check_usable(settings.distribute, tc)

    # toolchain: the pinned compiler, fetched, verified and unpacked (the host's compiler is not fetched)
    if tc.kind == "host":
        tc_step = Step("toolchain", "toolchain host", _digest("toolchain", tc.identity()), SKIP,
                       "the machine's compiler: digests hold only on this distribution", lambda: None)
    else:
        tc_hit = toolchain.unpacked(settings.cache_dir, tc)
        tc_step = Step(
            "toolchain", f"toolchain {tc.name}", _digest("toolchain", tc.identity()),
            DONE if tc_hit else RUN,
            f"{tc.label}: cached in {tc_hit}" if tc_hit else f"{tc.label}: {tc.package} wheel {_tc_origins(settings)}",
            lambda: toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log),
        )
    mode, path, path_sha = _source_mode(source)
    pins = sorted(a.sha256 for a in rec.archives)

    def fetch() -> sources.CachedArchive:
        return sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)

    # fetch: the release archive, by its pinned digest
    if mode == "path":
        fetch_step = Step("fetch", "fetch source", _digest(pins), SKIP, f"--source {path} is used instead", fetch)
    else:
        hit = sources.cached(settings.cache_dir, rec)
        fetch_step = Step(
            "fetch", "fetch source", _digest(pins),
            DONE if hit else RUN,
            f"cached: {hit.archive.file} ({hit.origin})" if hit else _origins(settings),
            fetch,
        )

    # the wheels built against this tree: the wheel recipes naming this release and variant
    wheel_recipes, not_fit = wheel.matching_recipes(settings.recipes_dir, rec.version, rec.default_version, variant.name,
                                                    tuple(variant.values("targets")), arch)

    # wheelhouse: the hash-pinned build requirements: CMake and Ninja of the build, the wheels' too
    req_sets = [requirements.load_requirements(f) for f in wheel.requirement_files(settings, wheel_recipes)]
    reqs = req_sets[0]
    house = requirements.wheelhouse_dir(settings)
    missing = [m for r in req_sets for m in requirements.check_wheelhouse(house, r).missing]
    pinned = sum(len(r.items) for r in req_sets)
    house_step = Step(
        "wheelhouse", "fetch wheelhouse", _digest(*(r.digest() for r in req_sets)) if len(req_sets) > 1 else reqs.digest(),
        RUN if missing else DONE,
        f"{len(missing)} of {pinned} pinned wheels missing" if missing else f"complete in {house}",
        lambda: wheel.fetch_wheelhouses(settings, log, wheel_recipes),
    )

    # prune: the variant's deterministic subset of the release
    prune_id = _digest("prune", prune.PRUNE_RULES_VERSION, rec.prune.as_json(), pins, variant.values("targets"), variant.values("projects"))
    if mode != "pruned":
        prune_step = Step("prune", "prune source", prune_id, SKIP, f"--source {source} builds without pruning", lambda: None)
    else:
        pruned = _pruned_in_cache(settings, rec, variant)
        prune_step = Step(
            "prune", "prune source", prune_id,
            DONE if pruned else RUN,
            f"cached: {pruned.name}" if pruned else f"{variant.name} subset of {rec.name} {rec.version}",
            lambda: steps.ensure_pruned(settings, rec, fetch(), variant, log),
        )

    # build: the install tree
    build_id = llvm.inputs_digest(rec, variant, llvm.source_identity(mode, path_sha), tc)

    def build(refused: str | None = None) -> object:
        inputs = replace(steps.build_inputs(settings, rec, variant, source, log), toolchain=tc)
        if inputs.digest() != build_id:
            raise HermeticError("the build's inputs changed between planning and building",
                                f"planned {build_id[:16]}, got {inputs.digest()[:16]}", "run the command again")
        return llvm.build(settings, inputs, log, keep_build=keep_build, substitute_refused=refused)

    build_path = rec.build_path(variant.name)
    done, why = (None, "--force") if force else steps.finished_build(settings, build_path, build_id)
    # --force means "build it here": a substitute is not asked then.
    found = None if done or force or not settings.substitutes else substitute.find(
        settings.substitutes, build_id, environ or {}, log)
    image_dir = settings.work_dir / "images"
    deferred: list[Step] = []  # resolving steps a pull made unnecessary: run after all if the substitute is refused

    def pull() -> object:
        assert found is not None
        try:
            got = substitute.install(
                found, llvm.build_dir(settings, build_path), image_dir, f"{rec.title(variant.name)}-linux-{arch}",
                build_id, tc.identity(), arch, environ or {}, log,
            )
            log(f"build: {title} substituted from {got.substituted}: {got.tree.digest}, verified")
            return got
        except substitute.Refused as exc:
            refused = exc.what
        except RegistryError as exc:  # unreachable or failing mid-pull: not this build's problem
            refused = f"substitute {found.ref} failed: {exc.what}" + (f" ({exc.why})" if exc.why else "")
        log(f"warning: {refused}; building instead")
        for s in deferred:
            log(f"==> {s.name}")
            s.action()
        return build(refused)

    how = (f"linux/{arch}{f' cross-built on {platforms.machine_arch()}' if cross else ''}, {settings.jobs} jobs, "
           f"offline={settings.offline}, toolchain {tc.label}"
           + (f", compile cache {settings.compile_cache.shown} (ccache)" if settings.compile_cache else "")
           + (f", compiles spread over {settings.distribute.shown} (distcc)" if settings.distribute else ""))
    if done:
        build_step = Step("build", f"build {title}", build_id, DONE, f"up to date: {done}", build)
    elif found:
        build_step = Step("build", f"build {title}", build_id, PULL,
                          f"{found.ref} (tag {found.tag}), verified before use; else built: {how}", pull)
    else:
        build_step = Step("build", f"build {title}", build_id, RUN, f"{why}; {how}", build)

    # image: rewritten from the tree (deterministic, seconds), so never trusted from an earlier run,
    # except the very image a substitution pulled, which steps.make_image reuses
    record_json = llvm.build_dir(settings, build_path) / "record.json"
    image_step = Step(
        "image", f"image {title}", _digest("image", build_id, "gzip"), PULL if found else RUN,
        f"the substitute's layout, kept by the pull, under {image_dir}" if found else f"OCI layout under {image_dir}",
        lambda: steps.make_image(settings, record_json, image_dir, log),
    )

    # wheel: the wheel recipes that build against this tree (the compiler core lowers to PTX: a variant without
    # NVPTX cannot host it; a third-party recipe names its release and variant)
    prefix = llvm.build_dir(settings, build_path) / "install" / rec.prefix(variant.name).lstrip("/")
    wheel_id = _digest("wheel", build_id, *(w.digest() for w in wheel_recipes), *(r.digest() for r in req_sets))
    names = ", ".join(f"{w.sdist.name} {w.sdist.version}" if w.sdist else w.project for w in wheel_recipes)
    if not wheel_recipes:
        wheel_state, wheel_detail = SKIP, _no_wheel(variant, rec.version, not_fit)
    elif cross:
        wheel_state, wheel_detail = SKIP, f"no {arch} wheel here: `hermetic wheel --arch {arch} --python ROOT/…` builds it"
    else:
        wheel_state = RUN
        wheel_detail = "; ".join(
            f"{w.sdist.file} (sha256 {w.sdist.sha256[:12]}…)" if w.sdist else f"{w.project}" for w in wheel_recipes
        ) + f" against {rec.prefix(variant.name)}, offline"

    def make_wheels() -> None:
        for w in wheel_recipes:
            steps.make_wheel(settings, prefix, log, w.name)

    wheel_step = Step("wheel", f"wheel {names or '(none)'}", wheel_id, wheel_state, wheel_detail, make_wheels)
    # Resolving steps no later step of this job needs are skipped: a pulled or finished tree needs no
    # source, and only a build or a wheel that runs needs the compiler and the wheelhouse.
    keys = [s.key for s in (tc_step, fetch_step, house_step, prune_step, build_step, image_step, wheel_step)]
    builds = build_step.state == RUN
    wheels = keys.index(through) >= keys.index("wheel") and wheel_step.state == RUN
    reason = f"not needed: build {title} is {'pulled' if found else 'up to date'}"
    resolving = []
    # the release archive only feeds a prune that runs (or a build of the whole release)
    fetches = builds and (mode != "pruned" or prune_step.state == RUN)
    for s, needed in ((tc_step, builds or wheels), (fetch_step, fetches), (house_step, builds or wheels),
                      (prune_step, builds)):
        if not needed and s.state != SKIP:
            s = replace(s, state=SKIP, detail=reason if not builds else "not needed: the pruned source is cached")
            if found:
                deferred.append(s)
        resolving.append(s)
    return Plan(variant.name, (*resolving, build_step, image_step, wheel_step), build_path).upto(through)


def _source_mode(source: str) -> tuple[str, Path | None, str]:
    if source in ("pruned", "full"):
        return source, None, ""
    path = Path(source).resolve()
    if not path.is_file():
        raise SourceError(f"source archive {path} does not exist", "", "pass an existing .tar.xz, or pruned / full")
    return "path", path, file_sha256(path)


def _origins(settings: Settings) -> str:
    allowed = [f"{len(settings.mirrors)} mirror dir(s)"] if settings.mirrors else []
    allowed += ["URLs"] if settings.use_urls else []
    allowed += ["apt"] if settings.use_apt else []
    return "from " + (", ".join(allowed) if allowed else "nowhere: all origins are off")


def _tc_origins(settings: Settings) -> str:
    allowed = [f"{len(settings.mirrors)} mirror dir(s)"] if settings.mirrors else []
    allowed += ["PyPI (pip download)"] if settings.use_urls else []
    return "from " + (", ".join(allowed) if allowed else "nowhere: all origins are off")


def _no_wheel(variant: recipe.Variant, version: str, why: list[str]) -> str:
    return f"no wheel recipe builds against {variant.name} of LLVM {version}: {'; '.join(why) or 'there are none'}"


def _pruned_in_cache(settings: Settings, rec: recipe.Recipe, variant: recipe.Variant) -> Path | None:
    # the cached release's subset, else either pinned release's: the release need not be there (a bundle has none)
    hit = sources.cached(settings.cache_dir, rec)
    for archive in [hit.archive] if hit else rec.archives:
        path = steps.pruned_path(settings, rec, archive, variant)
        if path.is_file() and path.with_name("pruned.json").is_file():
            return path
    return None


def execute(plan: Plan, log: Log) -> None:
    for s in plan.steps:
        if s.state in (RUN, PULL):
            log(f"==> {s.name}" if s.state == RUN else f"==> {s.name} (pull)")
            s.action()

