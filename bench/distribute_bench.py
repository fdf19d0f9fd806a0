"""Distributed compile bench: one build spread over distccd compile hosts against a cold local build, one run.

    python3 -m bench.distribute_bench [--variant support] [--hosts 2] [--slots 2] [--order distributed-first]
                                      [--control] [--machine TEXT] [--json reports/distributed-support.json]

Sets up a compile host directory with `hermetic toolchain compile-host` (the verified pinned toolchain
and its identity-named compilers), starts Debian's distccd on 127.0.0.2, 127.0.0.3, … (a free port
each, statistics on), then builds twice in fresh work dirs: `--no-distribute` (cold, local) and
`--distribute 127.0.0.2:PORT/SLOTS,…`. Every figure is the wall time of the whole command; the tree
digests must be the same. `--control` adds a third local build with the distributed build's job count
(this machine's jobs plus every host's slots): on a machine shared with other work, more jobs alone take
a larger share of its cores, which is no merit of distribution. The report keeps the distributed record's entry and each daemon's own
count of finished compiles (distccd's `dcc_compile_ok`), which must add up to the record's.

Daemons on loopback addresses of the same machine share its cores: this shows the mechanism and its
overhead (preprocessing here, the relays, lzo), never a speed-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import sharing
from devtools import reportlib
from devtools.servers import Distccd

ROOT = Path(__file__).resolve().parents[1]


def build(work: Path, common: list[str], env: dict[str, str], extra: list[str]) -> dict[str, Any]:
    return reportlib.timed_build(work, common, env, extra, "distributed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="support")
    ap.add_argument("--toolchain", default="zig")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--hosts", type=int, default=2, help="distccd daemons on 127.0.0.2, 127.0.0.3, …")
    ap.add_argument("--slots", type=int, default=2, help="jobs each daemon takes")
    ap.add_argument("--order", choices=("local-first", "distributed-first"), default="local-first")
    ap.add_argument("--control", action="store_true", help="also build locally with the distributed build's job count")
    ap.add_argument("--machine", default="", help="what the machine is, for the report")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary dirs (printed)")
    args = ap.parse_args()

    env = reportlib.clean_env(ROOT)
    base = Path(tempfile.mkdtemp(prefix="hermetic-distcc-bench-"))
    host_bin = sharing.compile_host(base / "compile-host", args.toolchain, env)
    load_before = os.getloadavg()
    daemons: list[Distccd] = []
    try:
        daemons = sharing.start_distccds(base, host_bin, args.hosts, args.slots)
        hosts = ",".join(d.spec for d in daemons)
        common = ["--variant", args.variant, "--toolchain", args.toolchain, "--quiet"]
        jobs = ["--jobs", str(args.jobs)]
        same = ["--jobs", str(args.jobs + args.hosts * args.slots)]
        runs = {
            "local": lambda: build(base / "local" / "work", common, env, [*jobs, "--no-distribute"]),
            "local_same_jobs": lambda: build(base / "local-same-jobs" / "work", common, env, [*same, "--no-distribute"]),
            "distributed": lambda: build(base / "distributed" / "work", common, env, [*jobs, "--distribute", hosts]),
        }
        order = ["local", "distributed"] if args.order == "local-first" else ["distributed", "local"]
        if args.control:
            order.insert(1, "local_same_jobs")
        done = {name: runs[name]() for name in order}
        per_daemon = {f"{d.addr}:{d.port}": d.stats() for d in daemons}
    finally:
        sharing.stop_distccds(daemons)
    local, dist = done["local"], done["distributed"]
    digests = {name: r["tree_digest"] for name, r in done.items()}
    if len(set(digests.values())) != 1:
        sys.exit(f"tree digests differ: {digests}")
    ok = {k: int(v.get("dcc_compile_ok", "0")) for k, v in per_daemon.items()}
    report = {
        "what": f"{args.variant} built cold on this machine, then spread over {args.hosts} distccd compile hosts on "
                "loopback addresses of the same machine; fresh work dirs, whole-command wall times, one run",
        **reportlib.run_facts("distribute_bench.py", args.machine, load_before),
        "variant": args.variant,
        "toolchain": args.toolchain,
        "order": order,
        "tree_digest": local["tree_digest"],
        "tree_digests_identical": True,
        "local": local,
        "distributed": dist,
        "local_same_jobs": done.get("local_same_jobs"),
        "distributed_to_local": round(dist["wall_s"] / local["wall_s"], 3),
        "distributed_to_local_same_jobs": (round(dist["wall_s"] / done["local_same_jobs"]["wall_s"], 3)
                                           if "local_same_jobs" in done else None),
        "note": "the compile hosts are daemons on loopback addresses of this same machine: they share its cores with "
                "the build (which still preprocesses every file here), so no speed-up is possible; the ratio shows the "
                "mechanism's overhead, and the tree digests and the daemons' counts are the point",
        "daemons_compile_ok": ok,
        "daemons_stats": per_daemon,
    }
    reportlib.emit(report, args.json, base, args.keep)


if __name__ == "__main__":
    main()
