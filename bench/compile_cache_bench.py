"""Compile cache bench: a cold build through a fresh shared cache, then warm rebuilds in other directories, one run.

    python3 -m bench.compile_cache_bench [--variant support] [--toolchain host] [--cache redis|file] [--runs 1]
                                         [--baseline] [--machine TEXT] [--json reports/compile-cache-support.json]

Starts Debian's redis-server on a Unix socket in a temp dir (no TCP port), or uses a temp directory
(`--cache file`). Build A (a fresh work dir) runs `hermetic build llvm --compile-cache URL` against the
empty cache; each warm run B (a fresh work dir elsewhere) runs the same command against the filled one.
`--baseline` also builds once without the cache. Every figure is the wall time of the whole command;
every tree digest must be the same, and the report keeps each build's compile_cache record entry.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from devtools import reportlib
from devtools.servers import Redis

ROOT = Path(__file__).resolve().parents[1]


def build(work: Path, common: list[str], env: dict[str, str], extra: list[str]) -> dict[str, Any]:
    return reportlib.timed_build(work, common, env, extra, "compile_cache")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="support")
    ap.add_argument("--toolchain", default="host")
    ap.add_argument("--cache", choices=("redis", "file"), default="redis")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=1, help="warm rebuilds to time (each in a new work dir)")
    ap.add_argument("--baseline", action="store_true", help="also build once without the cache")
    ap.add_argument("--machine", default="", help="what the machine is, for the report")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work dirs (printed)")
    args = ap.parse_args()

    env = reportlib.clean_env(ROOT)
    base = Path(tempfile.mkdtemp(prefix="hermetic-ccache-bench-"))
    load_before = os.getloadavg()
    redis = None
    if args.cache == "redis":
        redis = Redis(base / "redis")
        redis.start()
        url = redis.url
    else:
        url = f"file://{base / 'shared'}"
    common = ["--variant", args.variant, "--toolchain", args.toolchain, "--jobs", str(args.jobs), "--quiet"]
    try:
        baseline = build(base / "plain" / "work", common, env, ["--no-compile-cache"]) if args.baseline else None
        cold = build(base / "a" / "work", common, env, ["--compile-cache", url])
        warm = [build(base / "b" / f"run{i}" / "work", common, env, ["--compile-cache", url]) for i in range(args.runs)]
    finally:
        if redis:
            redis.kill()
    digests = {r["tree_digest"] for r in [cold, *warm, *([baseline] if baseline else [])]}
    if len(digests) != 1:
        sys.exit(f"tree digests differ: {sorted(digests)}")
    report = {
        "what": f"{args.variant} built cold through an empty shared compile cache ({args.cache}), then rebuilt warm in "
                "another work directory; whole-command wall times, one run",
        **reportlib.run_facts("compile_cache_bench.py", args.machine, load_before),
        "variant": args.variant,
        "toolchain": args.toolchain,
        "jobs": args.jobs,
        "cache": args.cache,
        "tree_digest": digests.pop(),
        "baseline": baseline,
        "cold": cold,
        "warm": warm,
        "warm_to_cold": [round(w["wall_s"] / cold["wall_s"], 3) for w in warm],
    }
    reportlib.emit(report, args.json, base, args.keep)


if __name__ == "__main__":
    main()
