"""One build's environment, shared by the LLVM and the wheel builds: compiler, sandbox, compile cache, compile hosts.

`prepare` makes it once per build: the prepared toolchain (zig's wrappers and Conan profile, or the host's
compiler), the offline sandbox (network namespace, fixed environment; every step runs with umask 022 and
LC_ALL=C), the prefix maps, ccache with its remote storage and distcc's spread over compile hosts. The job
runs its steps through it and, at the end, `finish` gives back what the record says of the cache and the hosts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.build import compile_cache, distribute, netrelay, sandbox, wrappers
from hermetic.core.errors import EnvironmentError_
from hermetic.model import record

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model import settings as settings_values
    from hermetic.model.toolchains import Toolchain


def zig_global_cache(cache_dir: Path) -> Path | None:
    """zig's global cache, where it builds its runtimes (libc++, libc++abi, libunwind, compiler-rt, the glibc
    stubs) on a build's first link: in this user's source cache, so that every build of theirs after the
    first, LLVM's and the wheels', finds them built (in a fresh work dir, up to about 14 s of a warm nvptx
    rebuild's 43 s on the GPU runner, by the file times in reports/scale-nvptx-h200/floor.json). No bit of
    the tree depends on where they are: the installed libraries hold none of them, and a command that links
    strips their debug info (the one place their directory is named). None where the source cache cannot be
    written: the work dir's then.
    """
    d = cache_dir / "zig-global"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return d if os.access(d, os.W_OK | os.X_OK) else None


@dataclass(frozen=True)
class Compiler:
    """The toolchain a build compiles with, and where its generated files and caches go."""

    toolchain: Toolchain
    zig_root: Path | None  # the unpacked zig (fetch.toolchain.ensure); None for the host's compiler
    out: Path  # the wrappers and profiles are written here
    toolchain_dir: Path  # the checkout's toolchain/ (profile templates, reproducible.cmake)
    zig_cache: Path  # zig's local cache (and its global one unless global_cache says otherwise)
    build: Toolchain | None = None  # a cross build's build-machine toolchain (toolchains.for_build_machine)
    drop_flags: tuple[str, ...] = ()  # a wheel recipe's zig_link.drop
    global_cache: Path | None = None  # zig_global_cache


def compiler_for(
    settings: settings_values.Settings, toolchain: Toolchain, zig_root: Path | None, out: Path, *,
    build: Toolchain | None = None, drop_flags: tuple[str, ...] = (),
) -> Compiler:
    """The Compiler of a build with these settings, LLVM's or a wheel's: zig's local cache in the work dir, its
    global one (the runtimes) in the source cache (zig_global_cache), so that no build of a user's builds them
    twice. A build from a bundle has the bundle's cache as its source cache: nothing of the user's is used."""
    return Compiler(toolchain, zig_root, out, settings.toolchain_dir, settings.work_dir / "zig-cache", build=build,
                    drop_flags=drop_flags, global_cache=zig_global_cache(settings.cache_dir) if zig_root else None)


@dataclass
class BuildEnv:
    """A prepared build environment; `run` runs one step in it."""

    offline: sandbox.Offline
    prefix: tuple[str, ...]  # the command prefix that keeps a step off the network
    base: dict[str, str]  # the sandbox's variables and the job's own, before the compiler's
    env: dict[str, str]  # what the steps run with
    prepared: wrappers.Prepared
    maps: str = ""  # the prefix maps, as compiler flags (HERMETIC_PREFIX_MAPS, read by reproducible.cmake)
    launchers: dict[str, str] = field(default_factory=dict)  # CMake's compiler launchers (ccache, distcc)
    cache_use: record.CompileCacheUse | None = None
    spread: Spread | None = None

    def layered(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The environment with variables the job knows only later (its venv, its recipe's) set under the
        compiler's, which they cannot override."""
        maps = {"HERMETIC_PREFIX_MAPS": self.maps} if self.maps else {}
        return self.base | maps | dict(extra) | self.prepared.env

    def run(self, argv: Sequence[str], *, what: str, cwd: Path, offline: bool = True, env: Mapping[str, str] | None = None,
            log_path: Path | None = None, quiet: bool = True, label: str = "", phases: Sequence[str] = (),
            fix: str = "") -> str:
        """One step, in the sandbox (`offline`: in its network namespace); returns its output."""
        return sandbox.run(argv, what=what, env=self.env if env is None else env, cwd=cwd,
                           prefix=self.prefix if offline else (), log_path=log_path, quiet=quiet, label=label,
                           phases=phases, fix=fix)

    def run_compiles(self, argv: Sequence[str], *, what: str, cwd: Path, log_path: Path, quiet: bool, label: str,
                     phases: Sequence[str]) -> str:
        """The step that compiles: with the compile hosts' relays running (and their sockets removed after)."""
        with ExitStack() as stack:
            prefix = self.prefix
            if self.spread is not None:
                stack.callback(shutil.rmtree, self.spread.sockets, True)
                if self.spread.relayed:
                    stack.enter_context(self.spread.relay)
                    prefix = (*self.prefix, *self.spread.inside)
            return sandbox.run(argv, what=what, env=self.env, cwd=cwd, prefix=prefix, log_path=log_path, quiet=quiet,
                               label=label, phases=phases)

    def finish(self, cwd: Path, log: Log) -> tuple[record.CompileCacheUse | None, record.DistributedCompiles | None]:
        """What the record says of the compile hosts (distcc's log) and the cache (ccache's counters)."""
        distributed = self.spread.finish(log) if self.spread is not None else None
        use = self.cache_use
        if use is not None:
            text = self.run(["ccache", "--print-stats"], what="read ccache's statistics", cwd=cwd, offline=False)
            counted = compile_cache.parse_stats(text, record.CacheStats)
            note = compile_cache.failure_note(use.answered, counted)
            use = dataclasses.replace(use, stats=counted, note=note)
            log(f"build: compile cache: {counted.hits} hits, {counted.misses} misses" + (f"; {note}" if note else ""))
        return use, distributed


def prepare(
    compiler: Compiler, *, epoch: int, offline: str, job_env: Mapping[str, str], work: Path, log: Log,
    path: Callable[[str], str] | None = None, cache: settings_values.CompileCache | None = None,
    hosts: settings_values.Distribution | None = None, jobs: int = 0, maps: Sequence[tuple[Path, str]] = (),
) -> BuildEnv:
    """The build's environment: the compiler prepared under `compiler.out`, the sandbox's variables with the
    job's (`job_env`) and the compiler's, `path` (the pinned CMake and Ninja first) applied to PATH, then the
    compile hosts (`hosts`, `jobs` in all) and the compile cache (`cache`), their files under `work`. `maps`:
    (directory, name) pairs each compile sees as /hermetic/NAME, for the variables set by `layered`."""
    policy, prefix = sandbox.offline_policy(offline)
    tc = compiler.toolchain
    if tc.kind != "host":
        shutil.rmtree(compiler.out, ignore_errors=True)  # a wheel build's, left by the one before
    prepared = wrappers.prepare(
        tc, compiler.zig_root, compiler.out, compiler.toolchain_dir, compiler.zig_cache, build=compiler.build,
        drop_flags=compiler.drop_flags, lib_link=cache is not None, global_cache=compiler.global_cache,
    )
    base = sandbox.build_env(epoch, job_env)
    env = base | prepared.env
    if path is not None:
        env["PATH"] = path(env["PATH"])
    flags = " ".join(f"-ffile-prefix-map={d}=/hermetic/{n}" for d, n in maps)
    benv = BuildEnv(policy, prefix, base, env, prepared, flags)
    if hosts is not None:
        benv.spread = _spread(hosts, compiler, work, env, policy, jobs, log)
        benv.launchers = benv.spread.launchers
    if cache is not None:
        # With compile hosts too, ccache comes first and sends only its misses on, through distcc (its
        # prefix_command): a hit costs no host anything, and the key is the same either way.
        benv.launchers, benv.cache_use = _compile_cache(
            cache, tc, work, env, policy, log, benv.spread.launch if benv.spread is not None else None)
    return benv


def _compile_cache(
    cache: settings_values.CompileCache, tc: Toolchain, new: Path, env: dict[str, str],
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
class Spread:
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
        use = summarize(self.dist, self.relayed, self.answered, counts, refused, self.reachable, self.distcc,
                        self.compilers, self.jobs)
        log(f"build: {use.remote} compiles on the hosts ("
            + ", ".join(f"{h.address}: {h.compiles}" for h in use.hosts) + f"), {use.local} here"
            + (f"; {use.note}" if use.note else ""))
        return use


def _spread(
    dist: settings_values.Distribution, compiler: Compiler, new: Path, env: dict[str, str], offline: sandbox.Offline,
    jobs: int, log: Log,
) -> Spread:
    """Send the compiles to `dist`'s hosts through distcc: CMake's compiler launchers (Conan's conf), the
    identity-named wrappers on the build's PATH (distcc preprocesses with them here), distcc's own state and
    log under the build, and the relays that make the hosts, and nothing else, reachable from the namespace.
    """
    if compiler.zig_root is None:  # check_usable refused the host toolchain before the plan ran
        raise EnvironmentError_("--distribute needs the pinned toolchain unpacked", "", "run `hermetic fetch`")
    found = distribute.find_distcc(env.get("PATH"))
    base = new / "distcc"
    named = distribute.write_wrappers(compiler.toolchain, compiler.zig_root, compiler.zig_cache, base / "bin")
    env["PATH"] = f"{base / 'bin'}{os.pathsep}{env['PATH']}"
    launch = base / "launch"
    launch.write_text(distribute.launcher_script(
        found.path, {Path(env["CC"]): named["cc"].name, Path(env["CXX"]): named["c++"].name}))
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
    log(f"build: compiles spread through {found.path} {found.version} as {named['c++'].name} "
        f"(the hosts need `hermetic toolchain compile-host`)")
    return Spread(dist, launchers, relayed, relay, inside, answered, client_log, reachable, found,
                  tuple(p.name for p in named.values()), jobs, sockets, launch)


def summarize(
    dist: settings_values.Distribution, relayed: bool, answered: Sequence[tuple[bool, str]], counts: distribute.ClientCounts,
    refused: Mapping[int, int], reachable: str, distcc: distribute.Distcc, compilers: Sequence[str], jobs: int,
) -> record.DistributedCompiles:
    """The record's entry: per host what it compiled (distcc's log) and refused (the relay); the totals."""
    hosts = []
    for i, h in enumerate(dist.hosts):
        seen_as = f"127.0.0.1:{distribute.INSIDE_PORT + i}" if relayed else h.address
        hosts.append(record.CompileHostUse(h.address, h.slots, answered[i][0], answered[i][1],
                                           counts.remote.get(seen_as, 0), refused.get(i, 0), counts.failed.get(seen_as, 0)))
    remote = sum(x.compiles for x in hosts)
    notes = []
    if counts.rerouted:
        notes.append(f"{counts.rerouted} compiles whose host failed them (went away or refused) were compiled on another host")
    if counts.fallbacks:
        notes.append(f"{counts.fallbacks} compiles fell back to this machine (a host was unreachable, went away or was "
                     "backed off after a failure)")
    if counts.retried:
        notes.append(f"{counts.retried} compiles failed on a host and were compiled again here")
    if remote == 0:
        notes.append("no compile went to a host")
    return record.DistributedCompiles(
        hosts=tuple(hosts), reachable=reachable, distcc=distcc.path, distcc_version=distcc.version,
        compilers=tuple(compilers), jobs=jobs, remote=remote, local=counts.local, fallbacks=counts.fallbacks,
        retried=counts.retried, rerouted=counts.rerouted, note="; ".join(notes),
    )
