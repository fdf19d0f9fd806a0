"""The arm64 wheel of tilec, measured: two cross builds in different work dirs, the amd64 wheel, auditwheel's
verdict, and kernels lowered to PTX by each wheel (arm64 under qemu-user), in one run.

    python3 -m bench.arm64_wheel_report --arm64-llvm PREFIX --amd64-llvm PREFIX [--root DIR]
                                        [--machine TEXT] [--json reports/arm64-wheel.json]

PREFIX: an `nvptx` install prefix (install_root + prefix of its record.json), built with
`hermetic build llvm --arch arm64` and `--arch amd64`. --root: where the arm64 Debian root with python3.11
is made (devtools/debian_root.py; default: a temp dir). Builds A and B of the arm64 wheel run
`hermetic wheel src/compiler --arch arm64 --python ROOT/usr/bin/python3.11` in two fresh work dirs (each
with its own cold zig cache), so their sha256 must agree; the amd64 wheel is built once, the same way
without --arch. Every wall time is the whole command's. The PTX comes from tests/functional/tilec_ptx_probe.py
run by each wheel's own Python, with llvmlite from tests/integration/tilec-runtime-arm64.txt (hash-pinned)
for the arm64 one.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's hermetic

from devtools import reportlib
from devtools.debian_root import make_root
from hermetic.core import platforms

ARM = platforms.PLATFORMS["arm64"]
ARM_PIP = ["--platform", "manylinux_2_28_aarch64", "--python-version", "3.11", "--implementation", "cp",
           "--abi", "cp311", "--only-binary=:all:"]


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def build(llvm: Path, work: Path, env: dict[str, str], extra: list[str],
          what: list[str] | None = None) -> dict[str, Any]:
    """`hermetic wheel` of `what` (default: the compiler core's directory; `--recipe NAME` for a recipe's sdist)."""
    work.mkdir(parents=True)
    args = ["wheel", *(what or [str(ROOT / "src" / "compiler")]), "--llvm", str(llvm), "--work-dir", str(work),
            "--output", str(work / "dist"), "--offline", "auto", *extra]
    started = time.monotonic()
    proc = run([sys.executable, "-m", "hermetic", *args], env, work)
    took = time.monotonic() - started
    printed = json.loads(proc.stdout)
    rec = json.loads((work / "dist" / "wheel-record.json").read_text())
    return {"command": "hermetic " + " ".join(args), "work_dir": str(work), "wheel": printed["wheel"],
            "sha256": printed["sha256"], "size": rec["size"], "wall_s": round(took, 1), "timings_s": rec["timings_s"],
            "platform_tag": rec["platform_tag"], "python": rec["python"], "toolchain": printed["toolchain"],
            "glibc_required": rec["glibc_required"], "path": printed["path"]}


def auditwheel_show(work: Path, wheel: str) -> dict[str, Any]:
    (tool,) = sorted(Path(work, "wheel", "venv").glob("*/bin/auditwheel"))
    proc = subprocess.run([str(tool), "show", "--json", str(Path(work, "dist", wheel))], capture_output=True, text=True)
    report = json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr.strip()}
    keep = ("overall_tag", "sym_tag", "external_libs", "error")
    return {k: v for k, v in report.items() if k in keep} | {"tool": "auditwheel show --json (the build venv's, on x86_64)"}


def lower(python: list[str], site: Path, cache: Path) -> tuple[dict[str, Any], float]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site), "LC_ALL": "C", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    proc = subprocess.run([*python, str(ROOT / "tests" / "integration" / "tilec_ptx_probe.py"), str(cache)],
                          capture_output=True, text=True, env=env)
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(python)} tilec_ptx_probe.py failed:\n{proc.stdout}\n{proc.stderr}")
    data: dict[str, Any] = json.loads(proc.stdout)
    return data, round(took, 1)


def install(wheels: list[Path], dest: Path, extra: list[str]) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index",
                    "--target", str(dest), *extra, *map(str, wheels)], check=True)
    return dest


def common_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the arm64 wheel reports (this one and llvmlite_arm64_report.py)."""
    ap.add_argument("--root", type=Path, help="the arm64 Debian root to make or reuse (default: a temp dir)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--machine", default="", help="what the machine is, for the report")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work dirs (printed)")


@dataclass(frozen=True)
class Start:
    """What an arm64 wheel report starts from: hermetic's environment, a scratch dir, the arm64 root and Python."""

    env: dict[str, str]
    base: Path
    load_before: tuple[float, float, float]
    started: float
    root: Path
    root_s: float

    @property
    def python(self) -> Path:
        return self.root / "usr" / "bin" / "python3.11"


def start(args: argparse.Namespace, prefix: str) -> Start:
    env = reportlib.clean_env(ROOT)
    env["HERMETIC_JOBS"] = str(args.jobs)
    base = Path(tempfile.mkdtemp(prefix=prefix))
    load_before = os.getloadavg()
    started = time.time()
    t0 = time.monotonic()
    root = make_root((args.root or base / "arm64-root").absolute(), "arm64")
    return Start(env, base, load_before, started, root, round(time.monotonic() - t0, 1))


def checkout() -> str:
    """This checkout's commit, marked when tracked files differ from it."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.strip())
    return commit + ("+local-changes" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm64-llvm", type=Path, required=True)
    ap.add_argument("--amd64-llvm", type=Path, required=True)
    common_arguments(ap)
    args = ap.parse_args()
    st = start(args, "hermetic-arm64-wheel-")
    env, base, load_before, started, root, root_s = st.env, st.base, st.load_before, st.started, st.root, st.root_s
    python = st.python
    packages = json.loads((root.parent / f"{root.name}.packages.json").read_text())
    arm_extra = ["--arch", "arm64", "--python", str(python)]

    a = build(args.arm64_llvm, base / "a" / "work", env, arm_extra)
    b = build(args.arm64_llvm, base / "elsewhere" / "b" / "work", env, arm_extra)
    amd = build(args.amd64_llvm, base / "amd64" / "work", env, [])
    audit = auditwheel_show(Path(a["work_dir"]), a["wheel"])

    deps = base / "deps"
    run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--require-hashes", "--no-deps",
         *ARM_PIP, "-r", str(ROOT / "tests" / "integration" / "tilec-runtime-arm64.txt"), "-d", str(deps)], env, ROOT)
    arm_site = install([Path(a["path"]), *sorted(deps.glob("*.whl"))], base / "arm-site", ARM_PIP)
    amd_site = install([Path(amd["path"])], base / "amd-site", [])
    qemu = [ARM.emulator[0], "-L", str(root), str(python)]
    arm_ptx, arm_s = lower(qemu, arm_site, base / "arm-cache")
    amd_ptx, amd_s = lower([sys.executable], amd_site, base / "amd-cache")

    def tree(prefix: Path) -> dict[str, Any]:
        for d in prefix.parents:
            if (d.parent / "record.json").is_file() and d.name == "install":
                rec = json.loads((d.parent / "record.json").read_text())
                return {"prefix": str(prefix), "record": str(d.parent / "record.json"), "variant": rec["variant"],
                        "tree_digest": rec["tree"]["digest"], "toolchain_target": rec["toolchain_id"]["target"]}
        return {"prefix": str(prefix)}

    same_ptx = {k: arm_ptx["sha256"].get(k) == v for k, v in amd_ptx["sha256"].items()}
    report = {
        "what": "tilec's manylinux_2_28_aarch64 wheel cross-built on x86_64 with the pinned zig toolchain, "
                "imported by Debian's arm64 python3.11 under qemu-aarch64-static",
        "command": "python3 -m bench.arm64_wheel_report " + " ".join(sys.argv[1:]),
        "machine": args.machine or f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "cpus": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "checkout": checkout(),
        "llvm": {"arm64": tree(args.arm64_llvm), "amd64": tree(args.amd64_llvm)},
        "arm64_root": {"made_by": "devtools/debian_root.py (apt-get --download-only with the machine's sources, dpkg-deb -x)",
                       "wall_s": root_s, "debs": len(packages),
                       "python": next((p["version"] for p in packages if p["package"] == "python3.11"), None)},
        "arm64_wheel": {"a": a, "b": b, "same_sha256": a["sha256"] == b["sha256"],
                        "auditwheel": audit},
        "amd64_wheel": amd,
        "ptx": {"kernels": sorted(amd_ptx["sha256"]), "arm64_sha256": arm_ptx["sha256"], "amd64_sha256": amd_ptx["sha256"],
                "identical": all(same_ptx.values()) and set(arm_ptx["sha256"]) == set(amd_ptx["sha256"]),
                "arm64": {"machine": arm_ptx["machine"], "llvm": arm_ptx["llvm"], "wall_s_under_qemu": arm_s},
                "amd64": {"machine": amd_ptx["machine"], "llvm": amd_ptx["llvm"], "wall_s": amd_s}},
    }
    for side in (a, b, amd):
        side.pop("path")
    reportlib.emit(report, args.json, base, args.keep)
    if not (report["arm64_wheel"]["same_sha256"] and report["ptx"]["identical"]):
        sys.exit("the two arm64 builds differ or the PTX differs: see the report")


if __name__ == "__main__":
    main()
