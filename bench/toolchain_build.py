"""The same LLVM variant built two ways on one machine, side by side.

    python3 -m bench.toolchain_build [--compare toolchain|arch] [--variant support] [--source ARCHIVE]
                                     [--jobs N] [--out DIR]
                                     [hermetic build options, e.g. --mirror DIR --wheelhouse DIR --no-urls]

--compare toolchain (the default): `--toolchain host` against the pinned `--toolchain zig`.
--compare arch: the pinned toolchain building for this machine (native) against building for the
other architecture (amd64 <-> arm64: a cross build, with its native tablegen and its test_package
under qemu-user).

Runs in one go on one machine: zig's one-off build of its runtime (libc++, libc++abi, libunwind,
compiler_rt, the glibc stubs) for each target into a fresh cache is timed on its own by compiling a
small C++ program first, then `hermetic build llvm` each way, each in a fresh work directory sharing
that zig cache. Prints and writes `toolchain-build-<variant>.json` (or `cross-build-<variant>.json`):
wall times, the ratio of the second to the first, both tree digests and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # this checkout's hermetic

from hermetic.build import wrappers
from hermetic.core import platforms
from hermetic.fetch import toolchain
from hermetic.model import toolchains
from hermetic.model.options import resolve


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def _build(name: str, how: list[str], work: Path, args: argparse.Namespace, extra: list[str]) -> dict[str, object]:
    argv = [sys.executable, "-m", "hermetic", "build", "llvm", "--variant", args.variant, *how,
            "--work-dir", str(work), "--jobs", str(args.jobs), "--quiet", *extra]
    if args.source:
        argv += ["--source", args.source]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])))
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"bench: the {name} build failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rec = json.loads((work / "llvm" / args.variant / "record.json").read_text())
    return {"how": how, "wall_s": round(wall, 1), "record_wall_s": rec["wall_time_s"], "tree_digest": rec["tree"]["digest"],
            "arch": rec.get("arch"), "cc": rec["toolchain"]["cc"], "toolchain_id": rec.get("toolchain_id", {"name": "host"})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", choices=("toolchain", "arch"), default="toolchain")
    ap.add_argument("--variant", default="support")
    ap.add_argument("--source", help="source archive (default: the pruned one from the cache)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", REPO / "reports")))
    ap.add_argument("--base", type=Path, help="scratch directory (default: a new temporary one)")
    ap.add_argument("--cache", help="hermetic's cache (default: its own default)")
    ap.add_argument("--mirror", action="append", default=[], help="where the zig wheel or slim archive is")
    args, extra = ap.parse_known_args()
    extra += [*(["--cache", args.cache] if args.cache else []), *(a for m in args.mirror for a in ("--mirror", m))]
    base = args.base or Path(tempfile.mkdtemp(prefix="hermetic-tcbench-"))

    here = platforms.machine_arch()
    if args.compare == "arch":
        other = next((a for a in platforms.PLATFORMS if a != here), None)
        if other is None:
            sys.exit(f"bench: no other architecture than {here} to cross-build for")
        # (label, `hermetic build llvm` arguments, the zig targets it compiles for)
        ways = [(here, ["--toolchain", "zig", "--arch", here], [here]),
                (other, ["--toolchain", "zig", "--arch", other], [other, here])]
    else:
        ways = [("host", ["--toolchain", "host"], []), ("zig", ["--toolchain", "zig"], [here])]

    # zig's runtime for each target a build compiles for, into the cache that build will find
    # (its work_dir/zig-cache), so the builds time LLVM alone
    given = {"work_dir": str(base), "mirrors": args.mirror or None, "cache_dir": args.cache}
    settings = resolve({k: v for k, v in given.items() if v}, os.environ, REPO)
    hello = base / "prime" / "hello.cpp"
    hello.parent.mkdir(parents=True, exist_ok=True)
    hello.write_text('#include <string>\n#include <iostream>\nint main(){std::cout<<std::string("x");}\n')
    prime: dict[str, dict[str, float]] = {}
    results = {}
    for label, how, arches in ways:
        work = base / label
        for arch in arches:
            tc = toolchains.select(toolchains.load(settings.toolchain_dir), "zig", arch=platforms.zig_arch(arch))
            zig_root = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, "--no-urls" not in extra)
            prep = wrappers.prepare(tc, zig_root, base / "prime" / label / arch, settings.toolchain_dir, work / "zig-cache")
            t0 = time.monotonic()
            subprocess.run([prep.env["CXX"], "-O2", str(hello), "-o", str(base / "prime" / label / arch / "hello")],
                           check=True, env=dict(os.environ, **prep.env))
            prime.setdefault(label, {})[tc.target] = round(time.monotonic() - t0, 1)
            print(f"bench: zig runtime for {tc.target} built in {prime[label][tc.target]}s", file=sys.stderr)
        results[label] = _build(label, how, work, args, extra)
        print(f"bench: {label} {results[label]['wall_s']}s {results[label]['tree_digest']}", file=sys.stderr)
    (first, _, _), (second, _, _) = ways
    report = {
        "bench": "cross-build" if args.compare == "arch" else "toolchain-build",
        "variant": args.variant,
        "jobs": args.jobs,
        "machine": {"os": _os_name(), "arch": platform.machine(), "cpus": os.cpu_count()},
        "zig_runtime_prime_s": prime,
        **results,
        f"ratio_{second}_over_{first}": round(float(results[second]["wall_s"]) / float(results[first]["wall_s"]), 3),  # type: ignore[arg-type]
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{report['bench']}-{args.variant}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
