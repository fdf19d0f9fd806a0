"""Substitution bench: a variant built here against the same variant substituted from a registry, one run.

    python bench/substitute_bench.py [--variant support] [--toolchain host] [--runs 3] [--json reports/substitute-support.json]

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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oci_bench import start_registry  # the bench's own registry starter

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hermetic", *args], cwd=cwd, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return took, proc


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
    (base / "registry").mkdir()
    reg, host = start_registry(base / "registry")
    try:
        a = base / "a"
        common = ["--variant", args.variant, "--toolchain", args.toolchain, "--jobs", str(args.jobs), "--quiet"]
        build_s, proc = timed(["build", "llvm", *common, "--work-dir", str(a / "work")], ROOT, env)
        built = json.loads(proc.stdout)
        rec_a = json.loads(Path(built["record"]).read_text())
        image_s, proc = timed(["image", "llvm", "--variant", args.variant, "--work-dir", str(a / "work"), "--quiet"], ROOT, env)
        name, digest, layout = proc.stdout.split()[:3]
        repo = f"cache/llvm-{args.variant}"
        push_s, proc = timed(["push", layout, f"{host}/{repo}:19.1.7", "--insecure", "--quiet"], ROOT, env)
        runs: list[dict[str, Any]] = []
        for i in range(args.runs):
            b = base / f"b{i}"
            (b / "cwd").mkdir(parents=True)
            took, proc = timed(
                ["build", "llvm", *common, "--work-dir", str(b / "work"), "--cache", str(b / "cache"), "--no-urls",
                 "--no-apt", "--substitute", f"http://{host}/{repo}"], b / "cwd", env | {"HOME": str(b)},
            )
            got = json.loads(proc.stdout)
            if got["tree_digest"] != built["tree_digest"] or not got.get("substituted"):
                sys.exit(f"run {i}: not a substitution of the same tree:\n{proc.stdout}\n{proc.stderr}")
            image_b, proc_img = timed(["image", "llvm", "--variant", args.variant, "--work-dir", str(b / "work"),
                                       "--quiet"], b / "cwd", env)
            if proc_img.stdout.split()[1] != digest:
                sys.exit(f"run {i}: image {proc_img.stdout.split()[1]} is not {digest}")
            runs.append({"build_llvm_s": round(took, 2), "image_llvm_s": round(image_b, 2),
                         "tree_digest": got["tree_digest"], "substituted": got["substituted"]})
    finally:
        reg.terminate()
        reg.wait(10)
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    best = min(r["build_llvm_s"] for r in runs)
    report = {
        "what": f"`hermetic build llvm --variant {args.variant}`: built here (A) against substituted from a local "
                "docker-registry (B: fresh work dir and empty cache, another cwd, --no-urls --no-apt); whole-command wall times",
        "command": " ".join(["python", "bench/substitute_bench.py", "--variant", args.variant, "--toolchain", args.toolchain,
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
