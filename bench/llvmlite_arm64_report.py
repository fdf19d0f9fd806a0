"""llvmlite's arm64 wheel, measured: cross-built twice from its pinned sdist against the `llvmlite-arm64` variant,
auditwheel's verdict, and llvmlite's own test suite run by Debian's arm64 python3.11 under qemu-user, in one run.

    python3 -m bench.llvmlite_arm64_report --llvm PREFIX [--root DIR] [--amd64-tests JSON]
                                           [--machine TEXT] [--json reports/llvmlite-arm64/report.json]

PREFIX: the install prefix of `hermetic build llvm --arch arm64 --llvm-version 22.1.8 --variant llvmlite-arm64`.
--root: where the arm64 Debian root with python3.11 is made or reused (devtools/debian_root.py). Builds A and B
run `hermetic wheel --recipe llvmlite --arch arm64 --python ROOT/usr/bin/python3.11` in two fresh work dirs
(B under umask 077), so their sha256 must agree. Wheel A is installed into a fresh venv of that arm64 Python
(made and run under qemu-aarch64-static, child processes too) and `python -m llvmlite.tests -v` runs there. --amd64-tests: an
amd64 run's summary (devtools/unittest_summary.py), whose skips the arm64 ones are compared with.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import arm64_wheel_report as arm  # build, auditwheel and install, shared with tilec's arm64 report
from devtools import reportlib, unittest_summary

ROOT = Path(__file__).resolve().parents[1]


def suite(root: Path, python: Path, wheel: Path, base: Path) -> tuple[dict[str, Any], str]:
    """A fresh venv of the arm64 Python (under qemu), the wheel installed into it, llvmlite's suite run."""
    qemu = [arm.ARM.emulator[0], "-L", str(root)]
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "HOME": str(base)}
    venv = base / "llvmlite-venv"
    arm.run([*qemu, str(python), "-m", "venv", "--without-pip", str(venv)], env, base)
    # The venv's python runs the arm64 interpreter under qemu with argv[0] kept (-0): sys.executable is then
    # this script, so the venv is found, and the tests that start `sys.executable` in a child process (what
    # binfmt_misc would do on a machine that registers qemu) run their child the same way.
    launcher = venv / "bin" / "python"
    launcher.unlink()
    launcher.write_text(f'#!/bin/sh\nexec {" ".join(qemu)} -0 "$0" {python} "$@"\n')
    launcher.chmod(0o755)
    site = next(venv.glob("lib/python3.*/site-packages"))
    arm.install([wheel], site, arm.ARM_PIP)
    where = arm.run([str(launcher), "-c",
                     "import sys, llvmlite, llvmlite.binding as b; "
                     "print(sys.prefix, llvmlite.__file__, b.get_process_triple(), '.'.join(map(str, b.llvm_version_info)))"],
                    env, Path("/")).stdout.split()
    started = time.monotonic()
    proc = subprocess.run([str(launcher), "-m", "llvmlite.tests", "-v"], cwd="/", env=env,
                          capture_output=True, text=True)
    took = round(time.monotonic() - started, 1)
    log = proc.stdout + proc.stderr
    summary = unittest_summary.summarize(log)
    summary.update({"exit_status": proc.returncode, "wall_s_under_qemu": took, "venv_prefix": where[0],
                    "llvmlite_from": where[1], "process_triple": where[2], "llvm": where[3]})
    return summary, log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llvm", type=Path, required=True, help="the llvmlite-arm64 variant's install prefix")
    ap.add_argument("--amd64-tests", type=Path, help="an amd64 run's llvmlite-tests.json, to compare the skips with")
    arm.common_arguments(ap)
    args = ap.parse_args()
    st = arm.start(args, "hermetic-llvmlite-arm64-")
    env, base, root, python = st.env, st.base, st.root, st.python
    extra = ["--arch", "arm64", "--python", str(python)]
    recipe = ["--recipe", "llvmlite"]
    a = arm.build(args.llvm, base / "a" / "work", env, extra, recipe)
    umask = os.umask(0o077)  # B also differs in the permissions its files are made with
    try:
        b = arm.build(args.llvm, base / "elsewhere" / "b" / "work", env, extra, recipe)
    finally:
        os.umask(umask)
    audit = arm.auditwheel_show(Path(a["work_dir"]), a["wheel"])
    tests, log = suite(root, python, Path(a["path"]), base)

    skips: dict[str, Any] = {}
    if args.amd64_tests:
        amd = json.loads(args.amd64_tests.read_text())
        # "module.Class.test: reason", as unittest_summary writes them
        amd_skips = dict(s.split(": ", 1) for s in amd.get("skipped_tests", []))
        ours = dict(s.split(": ", 1) for s in tests.get("skipped_tests", []))
        skips = {"amd64_run": str(args.amd64_tests), "same_as_amd64": sorted(set(ours) & set(amd_skips)),
                 "only_on_arm64": {t: ours[t] for t in sorted(set(ours) - set(amd_skips))},
                 "only_on_amd64": {t: amd_skips[t] for t in sorted(set(amd_skips) - set(ours))}}
    record = json.loads(Path(a["work_dir"], "dist", "wheel-record.json").read_text())
    report = {
        "what": "llvmlite's manylinux_2_28_aarch64 wheel cross-built on x86_64 from its pinned sdist against the "
                "llvmlite-arm64 variant with the pinned zig, and llvmlite's own suite run by Debian's arm64 python3.11 "
                "under qemu-aarch64-static",
        "command": "python3 -m bench.llvmlite_arm64_report " + " ".join(sys.argv[1:]),
        "machine": args.machine or f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "load_avg_before": [round(x, 2) for x in st.load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.started)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "checkout": arm.checkout(),
        "llvm": record.get("llvm"),
        "sdist": record["project"].get("sdist"),
        "wheel": {"a": a, "b": b, "same_sha256": a["sha256"] == b["sha256"], "auditwheel": audit},
        "tests": tests,
        "skips_against_amd64": skips,
    }
    for side in (a, b):
        side.pop("path")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.with_name("llvmlite-tests-arm64.log").write_text(log)
    reportlib.emit(report, args.json, base, args.keep)
    if not report["wheel"]["same_sha256"] or tests.get("result") != "OK":
        sys.exit("the two arm64 wheels differ or the suite did not pass: see the report")


if __name__ == "__main__":
    main()
