"""Substitution bench: a variant built here against the same variant substituted from a registry, one run.

    python3 -m bench.substitute_bench [--variant support] [--toolchain host] [--runs 3] [--json reports/substitute-support.json]

Starts Debian's docker-registry on 127.0.0.1 (a free port, storage in a temp dir). Machine A builds the
variant (`hermetic build llvm`, a fresh work dir, this machine's source cache), writes its image and
pushes it; machine B (a fresh work dir, an empty cache, another current directory, downloads off) runs
`hermetic build llvm --substitute`, `--runs` times, each into a new work dir. Every figure is the
wall time of the whole command, as a user would time it; B's tree digest must equal A's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import sharing
from devtools.servers import Registry

ROOT = Path(__file__).resolve().parents[1]


timed = sharing.hermetic_timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="support")
    ap.add_argument("--toolchain", default="host")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=3, help="substitutions to time (each into a new work dir)")
    ap.add_argument("--machine", default="", help="what the machine is, for the report")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work dirs and registry (printed)")
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    base = Path(tempfile.mkdtemp(prefix="hermetic-subst-bench-"))
    load_before = os.getloadavg()
    reg = Registry(base / "registry")
    reg.start()
    host = reg.host
    try:
        a = base / "a"
        common = ["--variant", args.variant, "--toolchain", args.toolchain, "--jobs", str(args.jobs), "--quiet"]
        build_s, proc = timed(["build", "llvm", *common, "--work-dir", str(a / "work")], ROOT, env)
        built = json.loads(proc.stdout)
        rec_a = json.loads(Path(built["record"]).read_text())
        published = sharing.publish(a / "work", args.variant, host, env)
        name, digest, image_s, push_s = published["name"], published["digest"], published["image_llvm_s"], published["push_s"]
        runs: list[dict[str, Any]] = []
        for i in range(args.runs):
            b = base / f"b{i}"
            got = sharing.substitute(b, common, published["repo"], env)
            took = got["wall_s"]
            if got["tree_digest"] != built["tree_digest"]:
                sys.exit(f"run {i}: substituted tree {got['tree_digest']}, built {built['tree_digest']}")
            image_b, proc_img = timed(["image", "llvm", "--variant", args.variant, "--work-dir", str(b / "work"),
                                       "--quiet"], b / "cwd", env)
            if proc_img.stdout.split()[1] != digest:
                sys.exit(f"run {i}: image {proc_img.stdout.split()[1]} is not {digest}")
            runs.append({"build_llvm_s": round(took, 2), "image_llvm_s": round(image_b, 2),
                         "tree_digest": got["tree_digest"], "substituted": got["substituted"]})
    finally:
        reg.stop()
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    best = min(r["build_llvm_s"] for r in runs)
    report = {
        "what": f"`hermetic build llvm --variant {args.variant}`: built here (A) against substituted from a local "
                "docker-registry (B: fresh work dir and empty cache, another cwd, --no-urls --no-apt); whole-command wall times",
        "command": " ".join(["python3", "-m", "bench.substitute_bench", "--variant", args.variant, "--toolchain", args.toolchain,
                             "--runs", str(args.runs)]),
        "machine": args.machine or f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "variant": args.variant,
        "toolchain": args.toolchain,
        "jobs": args.jobs,
        # the machine may be shared: its load before and after says how contended the build's time was
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "inputs_digest": rec_a["inputs_digest"],
        "tree_digest": built["tree_digest"],
        "image": {"name": name, "digest": digest},
        "a_build_llvm_s": round(build_s, 2),
        "a_build_phase_s": rec_a["wall_time_s"],
        "a_image_llvm_s": round(image_s, 2),
        "a_push_s": round(push_s, 2),
        "b_substitute_runs": runs,
        "b_best_s": best,
        "ratio_substitute_to_build": round(best / build_s, 4),
        "speedup": round(build_s / best, 1),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
