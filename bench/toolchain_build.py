"""The same LLVM variant built with the host compiler and with the pinned zig toolchain, side by side.

    python3 bench/toolchain_build.py [--variant support] [--source ARCHIVE] [--jobs N] [--out DIR]
                                     [hermetic build options, e.g. --mirror DIR --wheelhouse DIR --no-urls]

Runs in one go on one machine: zig's one-off build of its runtime (libc++, libc++abi, libunwind,
compiler_rt, the glibc stubs) into a fresh cache is timed on its own by compiling a small C++
program first, then `hermetic build llvm` with `--toolchain host` and with `--toolchain zig`, each
in a fresh work directory sharing that zig cache. Prints and writes `toolchain-build-<variant>.json`:
wall times, the ratio zig/host, both tree digests and the machine.
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
sys.path.insert(0, str(REPO / "src"))

from hermetic import toolchain  # noqa: E402
from hermetic.settings import resolve  # noqa: E402


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def _build(name: str, work: Path, args: argparse.Namespace, extra: list[str]) -> dict[str, object]:
    argv = [sys.executable, "-m", "hermetic", "build", "llvm", "--variant", args.variant, "--toolchain", name,
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
    return {"wall_s": round(wall, 1), "record_wall_s": rec["wall_time_s"], "tree_digest": rec["tree"]["digest"],
            "cc": rec["toolchain"]["cc"], "toolchain_id": rec.get("toolchain_id", {"name": "host"})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    zig_cache = base / "zig" / "zig-cache"

    # zig's runtime for the target, into the cache the zig build will find (work_dir/zig-cache)
    given = {"work_dir": str(base / "zig"), "mirrors": args.mirror or None, "cache_dir": args.cache}
    settings = resolve({k: v for k, v in given.items() if v}, os.environ, REPO)
    tc = toolchain.select(toolchain.load(settings.toolchain_dir), "zig")
    zig_root = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, "--no-urls" not in extra)
    prep = toolchain.prepare(tc, zig_root, base / "prime", settings.toolchain_dir, zig_cache)
    (base / "prime" / "hello.cpp").write_text("#include <string>\n#include <iostream>\nint main(){std::cout<<std::string(\"x\");}\n")
    t0 = time.monotonic()
    subprocess.run([prep.env["CXX"], "-O2", str(base / "prime" / "hello.cpp"), "-o", str(base / "prime" / "hello")],
                   check=True, env=dict(os.environ, **prep.env))
    prime = round(time.monotonic() - t0, 1)
    print(f"bench: zig runtime for {tc.target} built in {prime}s", file=sys.stderr)

    host = _build("host", base / "host", args, extra)
    print(f"bench: host {host['wall_s']}s {host['tree_digest']}", file=sys.stderr)
    zig = _build("zig", base / "zig", args, extra)
    print(f"bench: zig {zig['wall_s']}s {zig['tree_digest']}", file=sys.stderr)
    report = {
        "bench": "toolchain-build",
        "variant": args.variant,
        "jobs": args.jobs,
        "machine": {"os": _os_name(), "arch": platform.machine(), "cpus": os.cpu_count()},
        "zig_runtime_prime_s": prime,
        "host": host,
        "zig": zig,
        "ratio_zig_over_host": round(float(zig["wall_s"]) / float(host["wall_s"]), 3),  # type: ignore[arg-type]
        "ratio_zig_with_prime_over_host": round((float(zig["wall_s"]) + prime) / float(host["wall_s"]), 3),  # type: ignore[arg-type]
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"toolchain-build-{args.variant}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
