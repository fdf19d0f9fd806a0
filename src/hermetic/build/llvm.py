"""Build a slim LLVM install tree by driving the Conan recipe, offline.

The recipe is copied into the work directory and built with a private
CONAN_HOME there, so builds neither read nor write the user's Conan state and
two builds in different directories share nothing.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.build import buildenv
from hermetic.build.buildenv import toolchain_versions
from hermetic.build.env import BuildEnv, compiler_for, prepare
from hermetic.build.swap import NEW, recover, swap_in, swap_pending
from hermetic.build.testrun import TestRun, test_run
from hermetic.core import platforms, times
from hermetic.core.digests import file_sha256
from hermetic.core.errors import BuildError, HermeticError, SourceError, disk_full
from hermetic.fetch import prune, sources, toolchain
from hermetic.model import record, toolchains
from hermetic.plan.context import Decision, State

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.recipe import Recipe, Variant
    from hermetic.model.settings import Settings
    from hermetic.plan.context import Context


@dataclass(frozen=True)
class BuildInputs:
    recipe: Recipe
    variant: Variant
    source_archive: Path
    source_sha256: str
    sources: tuple[dict[str, str], ...]  # the release archives this source came from
    pruned: dict[str, Any] | None  # {"sha256", "size", "file"} when built from a pruned archive
    source_mode: str = "pruned"  # "pruned" | "full" | "path" (an archive the user named)
    toolchain: toolchains.Toolchain | None = None  # None: toolchain/toolchains.yml's default

    def digest(self) -> str:
        return inputs_digest(
            self.recipe, self.variant, source_identity(self.source_mode, self.source_sha256), self.toolchain
        )


def source_identity(mode: str, path_sha256: str = "") -> dict[str, str]:
    """What identifies the source of a build before it is fetched or pruned.

    The release archives are pinned by sha256 in the recipe and pruning is deterministic, so
    `pruned` and `full` are identified by the recipe's digest (which covers the pins and the
    prune rules) plus the pruning code's version; only an archive the user names by path adds its
    own digest.
    """
    if mode == "pruned":
        return {"mode": mode, "prune_code": str(prune.PRUNE_RULES_VERSION)}
    if mode == "full":
        return {"mode": mode}
    return {"mode": "path", "sha256": path_sha256}


def inputs_digest(
    recipe: Recipe, variant: Variant, source: dict[str, str], tc: toolchains.Toolchain | None = None
) -> str:
    """The digest a build step is known by: computable before anything is fetched (the plan needs it)."""
    tc = tc or toolchains.for_root(recipe.project_root)
    data = {
        "recipe": recipe.digest(),
        "variant": variant.digest(),
        "source": source,
        "toolchain": _toolchain_digest(recipe.project_root / "toolchain"),
        "compiler": tc.identity(),  # its target names the architecture
    }
    build_tc = toolchains.for_build_machine(tc)
    if build_tc is not None:
        # A cross build also compiles and runs tablegen for the build machine; a native build's
        # data stays as it was, so its digest does not change.
        data["build_machine_compiler"] = build_tc.identity()
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _toolchain_digest(toolchain: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in toolchain.rglob("*") if p.is_file()):
        h.update(f.relative_to(toolchain).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build_dir(settings: Settings, build_path: str) -> Path:
    """WORK_DIR/<recipe>/<variant>[-<release>] (Recipe.build_path)."""
    return settings.work_dir / build_path


def finished_build(settings: Settings, build_path: str, inputs_digest: str) -> tuple[str | None, str]:
    """(tree digest, "") of an identical earlier build whose tree is still intact, else (None, why not)."""
    path = build_dir(settings, build_path) / "record.json"
    if swap_pending(path.parent):
        # Planning changes nothing: the build step finishes or undoes the swap (swap.recover).
        return None, "an earlier build was cut off while being swapped in"
    if not path.is_file():
        return None, "not built yet"
    rec = record.load_build_record(path)  # a damaged record is an error, never a silent rebuild
    if rec.inputs_digest != inputs_digest:
        return None, "inputs differ from the recorded build"
    root = Path(rec.install_root)
    if not root.is_dir() or record.tree_digest(record.scan_tree(root)) != rec.tree.digest:
        return None, "the recorded tree was changed or removed"
    return rec.tree.digest, ""


class BuildStep:
    """The install tree: `done` when an intact build of the same inputs is there, `pull` when a substitute holds
    it, else built from the source the resolving steps left in the context."""

    key = "build"

    def name(self, ctx: Context) -> str:
        return f"build {ctx.title}"

    def inputs_digest(self, ctx: Context) -> str:
        return inputs_digest(ctx.recipe, ctx.variant, source_identity(ctx.source.mode, ctx.source.sha256), ctx.toolchain)

    def plan(self, ctx: Context) -> Decision:
        digest = self.inputs_digest(ctx)
        done, why = (None, "--force") if ctx.force else finished_build(ctx.settings, ctx.build_path, digest)
        if done:
            return Decision(State.DONE, f"up to date: {done}")
        # --force means "build it here": a substitute is not asked then
        hit = None if ctx.force or ctx.substitutes is None else ctx.substitutes.find(digest, ctx.log)
        if hit is not None:
            ctx.outputs["substitute"] = hit
            return Decision(State.PULL, f"{hit.ref} (tag {hit.tag}), verified before use; else built: {_how(ctx)}")
        return Decision(State.RUN, f"{why}; {_how(ctx)}")

    def pull(self, ctx: Context) -> record.BuildRecord:
        """The substitute's build, verified and swapped in; raises Refused when it may not be used."""
        assert ctx.substitutes is not None
        got = ctx.substitutes.install(ctx.outputs["substitute"], ctx, self.inputs_digest(ctx))
        ctx.log(f"build: {ctx.title} substituted from {got.substituted}: {got.tree.digest}, verified")
        return got

    def run(self, ctx: Context, refused: str | None = None) -> record.BuildRecord:
        inputs = self.source(ctx)
        planned = self.inputs_digest(ctx)
        if inputs.digest() != planned:
            raise HermeticError("the build's inputs changed between planning and building",
                                f"planned {planned[:16]}, got {inputs.digest()[:16]}", "run the command again")
        return build(ctx.settings, inputs, ctx.log, keep_build=ctx.keep_build, substitute_refused=refused)

    def source(self, ctx: Context) -> BuildInputs:
        """What the build consumes, from what the resolving steps left in the context (or the cache)."""
        s, rec, variant, tc = ctx.settings, ctx.recipe, ctx.variant, ctx.toolchain
        if ctx.source.mode == "path":
            return _path_inputs(ctx)
        if ctx.source.mode == "pruned":
            meta = ctx.outputs.get("prune") or prune.cached_pruned(s.cache_dir, rec, variant, ctx.release_archives(), ctx.log)
            if meta is not None:
                return BuildInputs(rec, variant, Path(meta["path"]), meta["sha256"], (meta["from"],), meta, toolchain=tc)
        src = ctx.outputs.get("fetch") or sources.fetch_with(s, rec, ctx.log)
        ctx.outputs["fetch"] = src
        if ctx.source.mode == "full":
            return BuildInputs(rec, variant, src.path, src.archive.sha256, (src.as_json(),), None, "full", tc)
        meta = ctx.outputs["prune"] = prune.ensure_pruned(s.cache_dir, rec, src, variant, ctx.log)
        return BuildInputs(rec, variant, Path(meta["path"]), meta["sha256"], (src.as_json(),), meta, toolchain=tc)


def _path_inputs(ctx: Context) -> BuildInputs:
    """An archive the user named: with its pruned.json when one lies beside it, which must agree with it."""
    path = ctx.source.path
    assert path is not None
    meta_path = path.with_name("pruned.json")
    meta = prune.pruned_meta(meta_path) if meta_path.is_file() else None
    if meta is None:
        prune.check_archive(path)  # nothing vouches for it: read it through once
    elif meta.get("sha256") != ctx.source.sha256:
        raise SourceError(
            f"{path} does not match {meta_path}",
            f"expected sha256 {meta.get('sha256')}, got {ctx.source.sha256}",
            "copy the pruned archive and its pruned.json together, or prune again",
        )
    origin = [meta["from"]] if meta else [{"file": path.name, "sha256": ctx.source.sha256, "origin": f"path:{path}"}]
    return BuildInputs(ctx.recipe, ctx.variant, path, ctx.source.sha256, tuple(origin), meta, "path", ctx.toolchain)


def _how(ctx: Context) -> str:
    s, arch = ctx.settings, ctx.arch
    return (f"linux/{arch}{f' cross-built on {platforms.machine_arch()}' if ctx.cross else ''}, {s.jobs} jobs, "
            f"offline={s.offline}, toolchain {ctx.toolchain.label}"
            + (f", compile cache {s.compile_cache.shown} (ccache)" if s.compile_cache else "")
            + (f", compiles spread over {s.distribute.shown} (distcc)" if s.distribute else ""))


def build(
    settings: Settings, inputs: BuildInputs, log: Log, keep_build: bool = False, substitute_refused: str | None = None
) -> record.BuildRecord:
    """Build `inputs.variant` and return its record (also written to record.json).

    Transactional: everything is built under `.new/` and swapped in only once the build and its
    test_package passed, so a failed or interrupted rebuild leaves the previous tree and record
    intact and usable.
    """
    out = build_dir(settings, inputs.recipe.build_path(inputs.variant.name))
    recover(out)
    new = out / NEW
    shutil.rmtree(new, ignore_errors=True)
    try:
        new.mkdir(parents=True)
        rec = _build_into(new, out, settings, inputs, log, keep_build, substitute_refused)
    except BaseException:
        if keep_build:
            log(f"build: failed; the partial build stays in {new} (--keep-build)")
        else:
            shutil.rmtree(new, ignore_errors=True)
        raise
    swap_in(new, out, rec.tree.digest, keep_build)
    return rec


def _build_into(
    new: Path, out: Path, settings: Settings, inputs: BuildInputs, log: Log, keep_build: bool,
    substitute_refused: str | None,
) -> record.BuildRecord:
    recipe, variant = inputs.recipe, inputs.variant
    try:
        shutil.copytree(recipe.path, new / "recipe", ignore=shutil.ignore_patterns("__pycache__", "build"))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(new / "recipe"), exc) from exc
        raise
    conan_home = new / "conan-home"
    test_out = new / "test_package"
    test_out.mkdir()
    log_path = out / "build.log"
    log_path.write_text("")
    # The compiler: the pinned toolchain's generated profile and wrappers, or the host's detected one.
    tc = inputs.toolchain or toolchains.for_root(settings.root)
    # A cross build (the target is not this machine's): a second profile for the build machine, and
    # the test_package's program runs under qemu, checked now rather than after the compile.
    build_tc = toolchains.for_build_machine(tc)
    emulator = toolchains.emulator(toolchains.target_arch(tc)) if build_tc else None
    # A distributed build keeps this machine's jobs busy and every host's slots filled.
    jobs = settings.jobs + (settings.distribute.slots if settings.distribute else 0)
    benv, tools = _environment(new, settings, recipe.source_date_epoch, tc, build_tc, emulator, jobs, log, {
        "CONAN_HOME": str(conan_home), "HERMETIC_TEST_OUTPUT": str(test_out), "NINJA_STATUS": "[%f/%t] "})
    conan = buildenv.conan_command()
    started = time.time()
    if benv.prepared.detect:
        benv.run([*conan, "profile", "detect", "--force"], what="detect the compiler for Conan", cwd=new,
                 log_path=log_path)
    name = recipe.name
    argv = _conan_create(conan, new, inputs, benv, tools.exe("cmake"), jobs, emulator)
    log(f"build: {name} {recipe.version} variant {variant.name} with {jobs} jobs (log: {log_path})")
    benv.run_compiles(
        argv, what=f"build {name} variant {variant.name}", cwd=new, log_path=log_path, quiet=settings.quiet,
        label=f"{name}-{variant.name}",
        # A cross build's ninja also runs LLVM's nested native builds (one per tablegen), each counting
        # from 1: the phases cannot be named from the order, so the count goes unnamed.
        phases=() if benv.prepared.build_profile else ("compile", "install", "test_package"),
    )
    cache_use, distributed = benv.finish(new, log)
    pkg, commands = _built_package(benv, conan, f"{name}/{recipe.version}", new, log_path)
    install = out / "install"  # where the tree lands once swapped in; the record names it
    staged = new / "install"
    staged.mkdir()
    os.rename(pkg / "usr", staged / "usr")
    record.normalize_tree(staged, recipe.source_date_epoch)
    entries = record.scan_tree(staged)
    wall = time.time() - started
    ptx = sorted(test_out.glob("*.ptx"))
    ran = test_run(test_out, emulator, log_path)
    rec = _record(inputs, tc, benv, install, entries, ptx, ran, jobs, started, wall, commands, substitute_refused,
                  cache_use, distributed)
    record.write_record(new / "record.json", rec)
    if not keep_build:
        shutil.rmtree(conan_home, ignore_errors=True)
    log(
        f"build: done in {wall:.0f}s: {rec.tree.digest} "
        f"({rec.tree.size / 1e6:.1f} MB, {len(entries)} entries) -> {install}"
    )
    return rec


def _environment(
    new: Path, settings: Settings, epoch: int, tc: toolchains.Toolchain, build_tc: toolchains.Toolchain | None,
    emulator: tuple[str, ...] | None, jobs: int, log: Log, job_env: dict[str, str],
) -> tuple[BuildEnv, buildenv.BuildTools]:
    """The build's environment (env.prepare) with the pinned CMake and Ninja first on PATH, checked to be the
    ones run."""
    zig_root = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log)
    tools = buildenv.ensure(settings, log)
    compiler = compiler_for(settings, tc, zig_root, new / "toolchain", build=build_tc)
    benv = prepare(compiler, epoch=epoch, offline=settings.offline, job_env=job_env, work=new, log=log,
                   path=tools.path, cache=settings.compile_cache, hosts=settings.distribute, jobs=jobs)
    log(f"build: network isolation: {benv.offline.method}")
    log(f"build: toolchain {tc.label}")
    if build_tc and emulator:
        log(f"build: cross build for linux/{toolchains.target_arch(tc)} on {platforms.machine_arch()}: tablegen built "
            f"by {build_tc.label}, test_package run by {shlex.join(emulator)}")
    buildenv.check_versions(tools, benv.env)
    return benv, tools


def _conan_create(
    conan: list[str], new: Path, inputs: BuildInputs, benv: BuildEnv, cmake: Path, jobs: int,
    emulator: tuple[str, ...] | None,
) -> list[str]:
    """`conan create` of the copied recipe: the variant's options, the source archive, the profiles, the
    environment's compiler launchers."""
    recipe, variant = inputs.recipe, inputs.variant
    name = recipe.name
    options = [f"-o={name}/*:variant={variant.name}"] + [f"-o={name}/*:{k}={v}" for k, v in variant.options]
    confs = [
        f"-c=user.hermetic:source_archive={inputs.source_archive}",
        f"-c=user.hermetic:source_sha256={inputs.source_sha256}",
        f"-c=tools.build:jobs={jobs}",
        f"-c=tools.cmake:cmake_program={cmake}",
    ]
    if benv.launchers:
        confs.append(f"-c=tools.cmake.cmaketoolchain:extra_variables={json.dumps(benv.launchers)}")
    prepared = benv.prepared
    if prepared.build_profile is not None:
        profiles = [f"-pr:h={prepared.profile}", f"-pr:b={prepared.build_profile}"]
    else:
        profiles = [f"-pr:a={prepared.profile}"]
    if emulator:
        confs.append(f"-c:h=user.hermetic:emulator={shlex.join(emulator)}")
    return [*conan, "create", str(new / "recipe"), f"--version={recipe.version}", *profiles, *options, *confs,
            "--build=missing", "--no-remote"]


def _built_package(benv: BuildEnv, conan: list[str], reference: str, new: Path, log_path: Path) -> tuple[Path, int | None]:
    """The package folder Conan built, and how many compile commands the build ran (its hermetic-commands.txt)."""
    listing = benv.run([*conan, "list", f"{reference}:*", "--format=json"], what="find the built package", cwd=new,
                       offline=False)
    pkg_ids = _package_ids(listing, reference)
    if len(pkg_ids) != 1:
        raise BuildError("cannot find the package Conan built", f"found {len(pkg_ids)} packages", f"see {log_path}")
    ref = f"{reference}:{pkg_ids[0]}"
    pkg = Path(benv.run([*conan, "cache", "path", ref], what="locate the package", cwd=new, offline=False).strip())
    bdir = Path(benv.run([*conan, "cache", "path", ref, "--folder", "build"], what="locate the build", cwd=new,
                         offline=False).strip())
    commands_file = next(iter(bdir.rglob("hermetic-commands.txt")), None)
    return pkg, len(commands_file.read_text().splitlines()) if commands_file else None


def _record(
    inputs: BuildInputs, tc: toolchains.Toolchain, benv: BuildEnv, install: Path, entries: list[record.TreeEntry],
    ptx: list[Path], ran: TestRun, jobs: int, started: float, wall: float, commands: int | None,
    substitute_refused: str | None, cache_use: record.CompileCacheUse | None,
    distributed: record.DistributedCompiles | None,
) -> record.BuildRecord:
    """The build's record (record.json)."""
    recipe, variant, offline = inputs.recipe, inputs.variant, benv.offline
    return record.BuildRecord(
        recipe=record.RecipeRef(recipe.name, recipe.version, recipe.digest()),
        variant=variant.name,
        options=tuple(sorted(dict(variant.options).items())),
        inputs_digest=inputs.digest(),
        sources=tuple(record.SourceOrigin.from_json(s, "build inputs", "sources") for s in inputs.sources),
        source_archive=record.SourceArchive(inputs.source_archive.name, inputs.source_sha256),
        pruned=record.PrunedSource.from_json(inputs.pruned, "build inputs", "pruned") if inputs.pruned else None,
        prefix=recipe.prefix(variant.name),
        source_date_epoch=recipe.source_date_epoch,
        offline=record.Offline(offline.enforced, offline.method, offline.reason),
        toolchain=record.ToolchainVersions.from_mapping(toolchain_versions(benv.env)),
        jobs=jobs,
        wall_time_s=round(wall, 1),
        started=times.iso(started),
        finished=times.iso(started + wall),
        build_commands=commands,
        test_package=record.TestPackage(
            True, tuple(record.PtxFile(p.name, file_sha256(p)) for p in ptx), output=ran.output, emulator=ran.emulator,
        ),
        install_root=str(install),
        tree=record.Tree.from_entries(entries),
        toolchain_id=record.ToolchainRef.from_mapping(tc.identity()),
        arch=toolchains.target_arch(tc),
        substitute_refused=substitute_refused,
        compile_cache=cache_use,
        distributed=distributed,
    )


def _package_ids(listing: str, reference: str) -> list[str]:
    data = json.loads(listing[listing.index("{"):])
    ids: list[str] = []
    for cache in data.values():
        for ref, rrevs in cache.items():
            if not ref.startswith(reference):
                continue
            for rrev in rrevs.get("revisions", {}).values():
                ids.extend(rrev.get("packages", {}).keys())
    return ids
