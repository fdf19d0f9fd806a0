"""Scale report: one variant built cold here, then shared every way hermetic shares builds, in one run.

    python3 -m bench.scale_bench [--variant support] [--toolchain zig] [--hosts 2] [--slots 2] [--machine TEXT]
                                 [--base DIR] [--json reports/scale-support.json]
                                 [--source ARCHIVE] [--mirror DIR] [--wheelhouse DIR] [--offline MODE] [--no-downloads]
                                 [--keep-build] [--runs cold,warm_another_user,...]

Run as root (the other user is made with setpriv). Each figure is the wall time of the whole
`hermetic build llvm` command in a fresh work directory, with its ratio to the cold build:

1. cold: this machine's source cache, through an empty shared compile cache (Redis on a Unix socket,
   unixsocketperm 777 so the other user can reach it), which it fills;
2. warm, another directory: the same command elsewhere, reading the cache;
3. warm, another user: uid 64123 (no account), its own source cache (hard links to this one's files,
   read-only to it) and HOME, another directory, the same cache;
4. distributed: cold, no cache, the compiles spread over distccd compile hosts on 127.0.0.2, .3, … of
   this same machine (so no speed-up is possible: it shows the mechanism's cost);
5. substituted: the cold build's image pushed to a local docker-registry, then `--substitute` into a
   fresh work dir with an empty source cache, downloads off.

Every tree digest must be the cold build's. The parts are started by devtools/servers.py and bench/sharing.py,
shared with the compile-cache, distribute and substitute benches. The compile host (`hermetic toolchain compile-host`) is
made before the cold build, untimed: it puts the pinned toolchain into the source cache, so that every
timed build finds it there.

On a runner without network (python3 -m devtools.runner --scale): --source names the carried pruned archive,
--mirror the carried toolchain, --wheelhouse the carried build requirements, --no-downloads turns URLs
and apt off; each is passed to every build. --runs picks the runs and their order (cold first: the
others compare with it); with --json the report is rewritten after each run ("complete": false and the
runs still "missing" until the last), so that a run cut short still leaves the figures it measured.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import sharing
from devtools import reportlib, users
from devtools.servers import Distccd, Redis, Registry

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="support")
    ap.add_argument("--toolchain", default="zig", help="a pinned toolchain: the distributed build needs one")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--hosts", type=int, default=2, help="distccd daemons on 127.0.0.2, 127.0.0.3, …")
    ap.add_argument("--slots", type=int, default=2, help="jobs each daemon takes")
    ap.add_argument("--machine", default="", help="what the machine is, and what else ran on it, for the report")
    ap.add_argument("--base", type=Path, help="where the work dirs go (default: a new temp dir)")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--keep", action="store_true", help="keep the work dirs (printed)")
    ap.add_argument("--source", type=absolute, help="every build's --source (a pruned archive)")
    ap.add_argument("--mirror", type=absolute, action="append", default=[], help="every build's --mirror; repeatable")
    ap.add_argument("--wheelhouse", type=absolute, help="every build's --wheelhouse")
    ap.add_argument("--offline", choices=("auto", "require", "off"), help="every build's --offline")
    ap.add_argument("--no-downloads", action="store_true", help="every build with --no-urls --no-apt")
    ap.add_argument("--keep-build", action="store_true", help="every build with --keep-build (ninja's log stays)")
    ap.add_argument("--runs", type=parse_runs, default=RUNS, help=f"which runs, in this order ({','.join(RUNS)})")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the warm build of another user is started with setpriv")

    env = reportlib.clean_env(ROOT)
    source_cache = Path(env.get("HERMETIC_CACHE") or Path.home() / ".cache" / "hermetic")
    if args.base:
        args.base.mkdir(parents=True)
        base = args.base
    else:
        base = Path(tempfile.mkdtemp(prefix="hermetic-scale-bench-"))
    os.chmod(base, 0o755)  # the other user passes through to its own directory and the cache's socket
    common = ["--variant", args.variant, "--toolchain", args.toolchain, "--jobs", str(args.jobs), "--quiet",
              *build_args(args)]
    load_before = os.getloadavg()
    # untimed: the compile hosts' compilers, and with them the pinned toolchain in the source cache
    host_bin = sharing.compile_host(base / "compile-host", args.toolchain, env, toolchain_args(args))
    redis = Redis(base / "redis", perm="777")
    redis.start()
    os.chmod(base / "redis", 0o755)
    url = redis.url
    daemons: list[Distccd] = []
    registry: Registry | None = None
    runs: dict[str, dict[str, Any]] = {}
    extras: dict[str, Any] = {}

    def report(complete: bool) -> dict[str, Any]:
        cold = runs["cold"]["wall_s"]
        digests = {name: r["tree_digest"] for name, r in runs.items()}
        return {
            "what": f"{args.variant} ({args.toolchain}) built cold, then rebuilt warm from a shared compile cache in "
                    "another directory and as another user, built distributed over distccd hosts, and substituted from "
                    "a registry; fresh work dirs, whole-command wall times, one run",
            **reportlib.run_facts("scale_bench.py", args.machine, load_before),
            "complete": complete,
            "missing": [name for name in args.runs if name not in runs],
            "variant": args.variant,
            "toolchain": args.toolchain,
            "jobs": args.jobs,
            "compile_cache": url,
            "tree_digest": runs["cold"]["tree_digest"],
            "tree_digests_identical": len(set(digests.values())) == 1,
            "summary": [{"run": name, "wall_s": r["wall_s"], "to_cold": round(r["wall_s"] / cold, 3),
                         "tree_digest": r["tree_digest"]} for name, r in runs.items()],
            "runs": runs,
            **extras,
            "notes": [
                "the warm rebuilds compile nothing of LLVM's that the cache holds; what is left is CMake's configure, "
                "zig's runtimes (libc++, compiler-rt, glibc stubs) where the user's zig cache (in their source cache) "
                "has none yet, the tablegen runs, install and digests: bench/scale_floor.py splits it by the logs",
                "the compile hosts are daemons on loopback addresses of this same machine: they share its cores with the "
                "build, which still preprocesses every file here, so the distributed figure shows the mechanism's cost",
            ],
        }

    def done(name: str) -> None:
        print(f"scale: {name}: {runs[name]['wall_s']} s, tree {runs[name]['tree_digest']}", file=sys.stderr, flush=True)
        if args.json and name != args.runs[-1]:
            args.json.write_text(json.dumps(report(False), indent=2) + "\n")

    def build(name: str, work: Path, extra: list[str], entry: str, **kw: Any) -> None:
        print(f"scale: {name} …", file=sys.stderr, flush=True)
        runs[name] = reportlib.timed_build(work, common, kw.pop("env", env), extra, entry, **kw)
        done(name)

    try:
        for name in args.runs:
            if name == "cold":
                build("cold", base / "a" / "work", ["--compile-cache", url], "compile_cache")
            elif name == "warm_another_directory":
                build(name, base / "b" / "elsewhere" / "work", ["--compile-cache", url], "compile_cache")
            elif name == "warm_another_user":
                # another user: its own home, source cache and work dir; this checkout and Python reachable to it
                home = users.user_dir(base / "user")
                cache = users.user_cache(source_cache, home / "cache")
                user_env = {k: v for k, v in env.items() if k != "HERMETIC_CACHE"} | {
                    "HOME": str(home), "USER": "hermetic-other", "LOGNAME": "hermetic-other"}
                reach = (Path(sys.prefix), Path(sys.base_prefix), ROOT, *reach_args(args))
                users.user_dir(home / "place")
                build(name, home / "place" / "work", ["--compile-cache", url, "--cache", str(cache)],
                      "compile_cache", env=user_env, as_user=functools.partial(users.as_user, reach=reach))
                extras["other_user"] = {
                    "uid": users.OTHER_UID, "source_cache": str(cache),
                    "how": "setpriv --reuid/--regid 64123 --clear-groups; a private mount namespace shows it this "
                           "checkout and Python only where they live in a directory it may not pass (such as /root)"}
            elif name == "distributed":
                daemons = sharing.start_distccds(base, host_bin, args.hosts, args.slots)
                hosts = ",".join(d.spec for d in daemons)
                build(name, base / "d" / "work", ["--distribute", hosts, "--no-compile-cache"], "distributed")
                extras["daemons_compile_ok"] = {
                    f"{d.addr}:{d.port}": int(d.stats().get("dcc_compile_ok", "0")) for d in daemons}
                sharing.stop_distccds(daemons)
                daemons = []
            elif name == "substituted":
                registry = Registry(base / "registry")
                registry.start()
                extras["published"] = sharing.publish(base / "a" / "work", args.variant, registry.host, env)
                print("scale: substituted …", file=sys.stderr, flush=True)
                runs[name] = sharing.substitute(base / "s", common, extras["published"]["repo"], env)
                done(name)
                registry.stop()
                registry = None
    finally:
        redis.kill()
        sharing.stop_distccds(daemons)
        if registry is not None:
            registry.stop()
    final = report(True)
    reportlib.emit(final, args.json, base, args.keep)
    if not final["tree_digests_identical"]:
        sys.exit(f"tree digests differ: { {name: r['tree_digest'] for name, r in runs.items()} }")


RUNS = ("cold", "warm_another_directory", "warm_another_user", "distributed", "substituted")


def parse_runs(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in RUNS]
    if unknown or not names or names[0] != "cold" or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"runs from {', '.join(RUNS)}, each once, cold first (got {text!r})")
    return names


def absolute(text: str) -> str:
    """A path given to the builds, which run from directories of their own."""
    return os.path.abspath(text)


def toolchain_args(args: argparse.Namespace) -> list[str]:
    """What finds the pinned toolchain without network: --mirror, --no-urls/--no-apt."""
    out = [x for m in args.mirror for x in ("--mirror", m)]
    return out + (["--no-urls", "--no-apt"] if args.no_downloads else [])


def build_args(args: argparse.Namespace) -> list[str]:
    """The options given to every build."""
    out = toolchain_args(args)
    if args.source:
        out += ["--source", args.source]
    if args.wheelhouse:
        out += ["--wheelhouse", args.wheelhouse]
    if args.offline:
        out += ["--offline", args.offline]
    return out + (["--keep-build"] if args.keep_build else [])


def reach_args(args: argparse.Namespace) -> list[Path]:
    """The directories of the carried files the other user's build reads: the source archive, the mirrors, the
    wheelhouse (as_user binds directories)."""
    paths = [Path(p) for p in (args.source, *args.mirror, args.wheelhouse) if p]
    return [p if p.is_dir() else p.parent for p in paths]


if __name__ == "__main__":
    main()
