"""Build a slim LLVM install tree by driving the Conan recipe, offline.

The recipe is copied into the work directory and built with a private
CONAN_HOME there, so builds neither read nor write the user's Conan state and
two builds in different directories share nothing.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.build import buildenv, compile_cache, distribute, netrelay, sandbox, wrappers
from hermetic.build.buildenv import toolchain_versions
from hermetic.build.swap import NEW, recover, swap_in, swap_pending
from hermetic.build.testrun import test_run
from hermetic.core import platforms, times
from hermetic.core.digests import file_sha256
from hermetic.core.errors import BuildError, EnvironmentError_, HermeticError, SourceError, disk_full
from hermetic.fetch import prune, sources, toolchain
from hermetic.model import record, toolchains
from hermetic.plan.context import Decision, State

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model import settings as settings_values
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
    epoch = recipe.source_date_epoch
    offline, prefix = sandbox.offline_policy(settings.offline)
    log(f"build: network isolation: {offline.method}")
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
    arch = toolchains.target_arch(tc)
    # A cross build (the target is not this machine's): a second profile for the build machine, and
    # the test_package's program runs under qemu, checked now rather than after the compile.
    build_tc = toolchains.for_build_machine(tc)
    emulator = toolchains.emulator(arch) if build_tc else None
    zig_root = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log)
    prepared = wrappers.prepare(
        tc, zig_root, new / "toolchain", settings.toolchain_dir, settings.work_dir / "zig-cache", build=build_tc,
        lib_link=settings.compile_cache is not None, global_cache=zig_global_cache(settings.cache_dir) if zig_root else None,
    )
    log(f"build: toolchain {tc.label}")
    if build_tc and emulator:
        log(f"build: cross build for linux/{arch} on {platforms.machine_arch()}: tablegen built by {build_tc.label}, "
            f"test_package run by {shlex.join(emulator)}")
    # CMake and Ninja: the pinned wheels' executables first on PATH, and checked to be the ones run.
    tools = buildenv.ensure(settings, log)
    env = sandbox.build_env(
        epoch,
        {"CONAN_HOME": str(conan_home), "HERMETIC_TEST_OUTPUT": str(test_out), "NINJA_STATUS": "[%f/%t] ",
         **prepared.env},
    )
    env["PATH"] = tools.path(env["PATH"])
    buildenv.check_versions(tools, env)
    conan = buildenv.conan_command()
    profile = prepared.profile
    started = time.time()
    if prepared.detect:
        sandbox.run(
            [*conan, "profile", "detect", "--force"],
            what="detect the compiler for Conan",
            env=env,
            cwd=new,
            prefix=prefix,
            log_path=log_path,
            quiet=True,
        )
    name = recipe.name
    options = [f"-o={name}/*:variant={variant.name}"] + [f"-o={name}/*:{k}={v}" for k, v in variant.options]
    # A distributed build keeps this machine's jobs busy and every host's slots filled.
    jobs = settings.jobs + (settings.distribute.slots if settings.distribute else 0)
    confs = [
        f"-c=user.hermetic:source_archive={inputs.source_archive}",
        f"-c=user.hermetic:source_sha256={inputs.source_sha256}",
        f"-c=tools.build:jobs={jobs}",
        f"-c=tools.cmake:cmake_program={tools.exe('cmake')}",
    ]
    launchers: dict[str, str] = {}
    spread: _Spread | None = None
    if settings.distribute:
        spread = _use_distribution(settings.distribute, tc, zig_root, settings.work_dir / "zig-cache", new, env, offline, jobs, log)
        launchers = spread.launchers
    cache_use = None
    if settings.compile_cache:
        # With compile hosts too, ccache comes first and sends only its misses on, through distcc (its
        # prefix_command): a hit costs no host anything, and the key is the same either way.
        launchers, cache_use = _use_compile_cache(
            settings.compile_cache, tc, new, env, offline, log, spread.launch if spread is not None else None
        )
    if launchers:
        confs.append(f"-c=tools.cmake.cmaketoolchain:extra_variables={json.dumps(launchers)}")
    if prepared.build_profile is not None:
        profiles = [f"-pr:h={profile}", f"-pr:b={prepared.build_profile}"]
    else:
        profiles = [f"-pr:a={profile}"]
    if emulator:
        confs.append(f"-c:h=user.hermetic:emulator={shlex.join(emulator)}")
    log(f"build: {name} {recipe.version} variant {variant.name} with {jobs} jobs (log: {log_path})")
    with ExitStack() as stack:
        step_prefix = prefix
        if spread is not None:
            stack.callback(shutil.rmtree, spread.sockets, True)
        if spread is not None and spread.relayed:
            stack.enter_context(spread.relay)
            step_prefix = (*prefix, *spread.inside)
        sandbox.run(
            [*conan, "create", str(new / "recipe"), f"--version={recipe.version}", *profiles, *options, *confs,
             "--build=missing", "--no-remote"],
            what=f"build {name} variant {variant.name}",
            env=env,
            cwd=new,
            prefix=step_prefix,
            log_path=log_path,
            quiet=settings.quiet,
            label=f"{name}-{variant.name}",
            # A cross build's ninja also runs LLVM's nested native builds (one per tablegen), each counting
            # from 1: the phases cannot be named from the order, so the count goes unnamed.
            phases=() if prepared.build_profile else ("compile", "install", "test_package"),
        )
    distributed = spread.finish(log) if spread is not None else None
    listing = sandbox.run(
        [*conan, "list", f"{name}/{recipe.version}:*", "--format=json"],
        what="find the built package", env=env, cwd=new, log_path=None, quiet=True,
    )
    if cache_use is not None:
        stats = sandbox.run(["ccache", "--print-stats"], what="read ccache's statistics", env=env, cwd=new, quiet=True)
        counted = compile_cache.parse_stats(stats)
        note = compile_cache.failure_note(cache_use.answered, counted)
        cache_use = dataclasses.replace(cache_use, stats=counted, note=note)
        log(f"build: compile cache: {counted.hits} hits, {counted.misses} misses" + (f"; {note}" if note else ""))
    pkg_ids = _package_ids(listing, f"{name}/{recipe.version}")
    if len(pkg_ids) != 1:
        raise BuildError("cannot find the package Conan built", f"found {len(pkg_ids)} packages", f"see {log_path}")
    ref = f"{name}/{recipe.version}:{pkg_ids[0]}"
    pkg = Path(sandbox.run([*conan, "cache", "path", ref], what="locate the package", env=env, cwd=new, quiet=True).strip())
    bdir = Path(sandbox.run([*conan, "cache", "path", ref, "--folder", "build"], what="locate the build", env=env, cwd=new, quiet=True).strip())
    commands_file = next(iter(bdir.rglob("hermetic-commands.txt")), None)
    commands = len(commands_file.read_text().splitlines()) if commands_file else None

    install = out / "install"  # where the tree lands once swapped in; the record names it
    staged = new / "install"
    staged.mkdir()
    os.rename(pkg / "usr", staged / "usr")
    record.normalize_tree(staged, epoch)
    entries = record.scan_tree(staged)
    wall = time.time() - started
    ptx = sorted(test_out.glob("*.ptx"))
    ran = test_run(test_out, emulator, log_path)
    rec = record.BuildRecord(
        recipe=record.RecipeRef(recipe.name, recipe.version, recipe.digest()),
        variant=variant.name,
        options=tuple(sorted(dict(variant.options).items())),
        inputs_digest=inputs.digest(),
        sources=tuple(record.SourceOrigin.from_json(s, "build inputs", "sources") for s in inputs.sources),
        source_archive=record.SourceArchive(inputs.source_archive.name, inputs.source_sha256),
        pruned=record.PrunedSource.from_json(inputs.pruned, "build inputs", "pruned") if inputs.pruned else None,
        prefix=recipe.prefix(variant.name),
        source_date_epoch=epoch,
        offline=record.Offline(offline.enforced, offline.method, offline.reason),
        toolchain=record.ToolchainVersions.from_mapping(toolchain_versions(env)),
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
        arch=arch,
        substitute_refused=substitute_refused,
        compile_cache=cache_use,
        distributed=distributed,
    )
    record.write_record(new / "record.json", rec)
    if not keep_build:
        shutil.rmtree(conan_home, ignore_errors=True)
    log(
        f"build: done in {wall:.0f}s: {rec.tree.digest} "
        f"({rec.tree.size / 1e6:.1f} MB, {len(entries)} entries) -> {install}"
    )
    return rec


def zig_global_cache(cache_dir: Path) -> Path | None:
    """zig's global cache, where it builds its runtimes (libc++, libc++abi, libunwind, compiler-rt, the glibc
    stubs) on a build's first link: in this user's source cache, so that every build of theirs after the
    first finds them built (in a fresh work dir, up to about 14 s of a warm nvptx rebuild's 43 s on the GPU
    runner, by the file times in reports/scale-nvptx-h200/floor.json). No bit of the tree depends on where they are: the
    installed libraries hold none of them, and a command that links strips their debug info (the one
    place their directory is named). None where the source cache cannot be written: the work dir's then.
    """
    d = cache_dir / "zig-global"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK | os.X_OK) else None


def _use_compile_cache(
    cache: settings_values.CompileCache, tc: toolchains.Toolchain, new: Path, env: dict[str, str],
    offline: sandbox.Offline, log: Log, prefix: Path | None = None,
) -> tuple[dict[str, str], record.CompileCacheUse]:
    """Run the compiles through ccache with `cache` as its remote storage: CMake's compiler launchers, set
    through Conan's conf, and a ccache.conf of this build's own (env CCACHE_CONFIGPATH; the host's CCACHE_*
    variables never reach the build). `prefix`: the distributed build's launcher, which ccache runs its
    misses' compiles through. Returns the launcher variables and the record's entry, stats to come.
    """
    ccache = compile_cache.find_ccache(cache, env.get("PATH"))
    answered, seen = compile_cache.probe(cache)
    log(f"build: compile cache {cache.shown} through {ccache.path} {ccache.version}: "
        + (f"reachable: {seen}" if answered else f"not answering ({seen}): every compile runs, nothing is cached"))
    scripts = ""
    if tc.kind != "host":
        # The wrappers' text with fixed paths: a change of what they pass the compiler changes the keys.
        scripts = "\n".join(f"{k}\n{v}" for k, v in sorted(
            wrappers.wrapper_scripts(tc, Path("/zig"), Path("/zig-cache"), lib_dir=Path("/zig-lib")).items()))
    conf = compile_cache.write_config(
        new / "ccache", cache, base_dir=new, check=compile_cache.compiler_check(tc.identity(), scripts),
        compiler_type="clang" if tc.kind != "host" else None, prefix_command=prefix,
    )
    env["CCACHE_CONFIGPATH"] = str(conf)
    # What the build could reach: the cache, and the network only where it ran without isolation.
    network = "; no network besides (a fresh network namespace)" if offline.enforced else f"; and the network ({offline.reason})"
    use = record.CompileCacheUse(cache.shown, seen + network, answered, ccache.path, ccache.version, None,
                                 misses_to="the compile hosts (--distribute), through distcc" if prefix else "")
    return {"CMAKE_C_COMPILER_LAUNCHER": ccache.path, "CMAKE_CXX_COMPILER_LAUNCHER": ccache.path}, use


@dataclass
class _Spread:
    """A distributed build in progress: CMake's launchers, the relays, and what the record will say."""

    dist: settings_values.Distribution
    launchers: dict[str, str]
    relayed: bool
    relay: netrelay.Outside
    inside: tuple[str, ...]  # the step's prefix that runs it behind the inside relay
    answered: list[tuple[bool, str]]
    client_log: Path
    reachable: str
    distcc: distribute.Distcc
    compilers: tuple[str, ...]
    jobs: int
    sockets: Path
    launch: Path  # the launcher script (also ccache's prefix_command behind a compile cache)

    def finish(self, log: Log) -> record.DistributedCompiles:
        try:
            text = self.client_log.read_text(errors="replace")
        except OSError:
            text = ""
        counts = distribute.parse_client_log(text)
        refused = {i: self.relay.counts[p].refused for i, (p, _, _) in enumerate(self.relay.routes)} if self.relayed else {}
        use = distribute.summarize(self.dist, self.relayed, self.answered, counts, refused, self.reachable, self.distcc,
                                   self.compilers, self.jobs)
        log(f"build: {use.remote} compiles on the hosts ("
            + ", ".join(f"{h.address}: {h.compiles}" for h in use.hosts) + f"), {use.local} here"
            + (f"; {use.note}" if use.note else ""))
        return use


def _use_distribution(
    dist: settings_values.Distribution, tc: toolchains.Toolchain, zig_root: Path | None, zig_cache: Path, new: Path,
    env: dict[str, str], offline: sandbox.Offline, jobs: int, log: Log,
) -> _Spread:
    """Send the compiles to `dist`'s hosts through distcc: CMake's compiler launchers (Conan's conf), the
    identity-named wrappers on the build's PATH (distcc preprocesses with them here), distcc's own state and
    log under the build, and the relays that make the hosts, and nothing else, reachable from the namespace.
    """
    if zig_root is None:  # check_usable refused the host toolchain before the plan ran
        raise EnvironmentError_("--distribute needs the pinned toolchain unpacked", "", "run `hermetic fetch`")
    found = distribute.find_distcc(env.get("PATH"))
    base = new / "distcc"
    wrappers = distribute.write_wrappers(tc, zig_root, zig_cache, base / "bin")
    env["PATH"] = f"{base / 'bin'}{os.pathsep}{env['PATH']}"
    launch = base / "launch"
    launch.write_text(distribute.launcher_script(
        found.path, {Path(env["CC"]): wrappers["cc"].name, Path(env["CXX"]): wrappers["c++"].name}))
    launch.chmod(0o755)
    launchers = {"CMAKE_C_COMPILER_LAUNCHER": str(launch), "CMAKE_CXX_COMPILER_LAUNCHER": str(launch)}
    relayed = offline.enforced
    # distcc's own log beside build.log (kept after the build): where each compile ran, and why any came back
    client_log = new.parent / "distcc.log"
    client_log.write_text("")
    env.update(distribute.client_env(dist, relayed, base / "state", client_log))
    answered = [distribute.probe(h) for h in dist.hosts]
    # Unix socket paths are short (108 bytes): a directory of their own under /tmp, removed after the build.
    sockets = Path(tempfile.mkdtemp(prefix="hermetic-distcc-"))
    routes = [(str(sockets / f"{i}.sock"), h.host, h.port) for i, h in enumerate(dist.hosts)]
    relay = netrelay.Outside(routes)
    inside = tuple(netrelay.argv(sys.executable, [(distribute.INSIDE_PORT + i, p) for i, (p, _, _) in enumerate(routes)]))
    if relayed:
        reachable = (
            "compile hosts " + ", ".join(h.address for h in dist.hosts) + ", each through a Unix socket relayed to it "
            "alone (127.0.0.1:" + ", :".join(str(distribute.INSIDE_PORT + i) for i in range(len(dist.hosts)))
            + " inside the namespace); no network besides (a fresh network namespace)"
        )
    else:
        reachable = "compile hosts " + ", ".join(h.address for h in dist.hosts) + f" directly, and the network ({offline.reason})"
    for h, (ok, seen) in zip(dist.hosts, answered, strict=True):
        log(f"build: compile host {h.spec}: " + (seen if ok else f"not answering ({seen}): its share compiles here"))
    log(f"build: compiles spread through {found.path} {found.version} as {wrappers['c++'].name} "
        f"(the hosts need `hermetic toolchain compile-host`)")
    return _Spread(dist, launchers, relayed, relay, inside, answered, client_log, reachable, found,
                   tuple(p.name for p in wrappers.values()), jobs, sockets, launch)


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
