"""tilec's compile stages that run LLVM, with tilec's wheel built against two builds of one LLVM
variant (the pinned zig toolchain's and the host gcc's, say), side by side in one run.

    python3 -m bench.tilec_llvm_builds --wheel zig=A.whl --wheel host=B.whl [--rounds 6] [--reps 15]
                                       [--callgrind] [--target sm_90] [--out DIR]

Only the stages that run the LLVM under test are measured: llir (IR -> LLVM module), llir_opt
(libdevice link, optimisation) and ptx (NVPTX code generation). llvmlite printing the IR and ptxas
assembling the PTX are the same bits whichever wheel is loaded, and the ptxas process varies by tens
of percent from one minute to the next on a shared machine; no GPU is needed.

Each process compiles every kernel once, untimed, before it measures. Wall clock: each round is
one fresh process per wheel, the wheels taking turns (A, B; then B, A;
...), compiling every bench kernel --reps times; per round the median of each kernel's reps, then
the median over rounds. Instructions (--callgrind): valgrind's callgrind counts the instructions of
one process that compiles every kernel --callgrind-reps times, minus one that compiles none (imports
and the kernels' IR): a count that does not depend on what else the machine is doing.

Writes bench-llvm-builds.json; prints the ratios (first wheel / second) last.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib

ROOT = Path(__file__).resolve().parents[1]  # children run as `-m bench.NAME` from the checkout

KERNELS = ("vadd", "vadd_v8", "expsin")
LLVM_STAGES = ("llir", "llir_opt", "ptx")


# --------------------------------------------------------------------------- child: one process, one wheel
def child(reps: int, target: str) -> dict[str, Any]:
    """Seconds per kernel and stage for `reps` compiles of each kernel (reps 0: imports and IR only)."""
    import tilec
    from tilec import compiler as tc

    from bench import tilec_compile as bench

    c = tilec.Compiler(bench.tilec_settings(None))
    opts = tilec.CompileOptions(target=target)
    stages = c.stages(opts)
    irs = {name: tc._as_ir(bench.tilec_module(name)) for name in KERNELS}
    out: dict[str, Any] = {"llvm_version": tilec.llvm_version(), "times": {}}
    for name, ir in irs.items():
        # One compile first, untimed and also in a reps-0 process: the counts and times are of
        # compiles after LLVM's one-off initialisation.
        warm = tilec.Metadata(name="", target=target, signature=(), llvm_version=tilec.llvm_version())
        stages["ptx"](stages["llir_opt"](stages["llir"](ir, warm), warm), warm)
        per: dict[str, list[float]] = {s: [] for s in LLVM_STAGES}
        for _ in range(reps):
            md = tilec.Metadata(name="", target=target, signature=(), llvm_version=tilec.llvm_version())
            cur: Any = ir
            for stage in LLVM_STAGES:
                t0 = time.perf_counter()
                cur = stages[stage](cur, md)
                per[stage].append(time.perf_counter() - t0)
        out["times"][name] = per
    return out


def run_child(site: Path, reps: int, target: str, callgrind: Path | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.tilec_llvm_builds", "--child", str(reps), "--target", target]
    if callgrind is not None:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={callgrind}", "--dump-instr=no", *cmd]
    # a fixed hash seed: the same Python-side work in every process, for callgrind's counts
    env = {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600, check=False, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child ({' '.join(cmd[:3])} ...) failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def callgrind_total(path: Path) -> int:
    """The instructions callgrind counted in the whole process (its `totals:` line)."""
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"{path}: no totals line")


# --------------------------------------------------------------------------- parent
def cpu_machine() -> dict[str, Any]:
    """The CPU side of the machine (no GPU, no torch needed): what every report names."""
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
            "commit": os.environ.get("BENCH_COMMIT", "unknown")}  # fmt: skip


def install(wheel: Path, dest: Path) -> Path:
    site = dest / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
    )
    return site


def wall_rounds(sites: dict[str, Path], rounds: int, reps: int, target: str) -> dict[str, Any]:
    names = list(sites)
    per_round: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            res = run_child(sites[name], reps, target)
            per_round[name].append(
                {k: sum(statistics.median(res["times"][k][s]) for s in LLVM_STAGES) for k in KERNELS}
            )
            print(
                f"round {r + 1}/{rounds} {name}: "
                + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in per_round[name][-1].items()),
                flush=True,
            )
    return {
        n: {k: {"median_s": statistics.median(x[k] for x in rs), "rounds_s": [x[k] for x in rs]} for k in KERNELS}
        for n, rs in per_round.items()
    }


def instructions(sites: dict[str, Path], reps: int, target: str, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, site in sites.items():
        base = callgrind_total(_counted(site, 0, target, work / f"{name}-0.out"))
        full = callgrind_total(_counted(site, reps, target, work / f"{name}-{reps}.out"))
        out[name] = {
            "reps": reps,
            "baseline": base,
            "with_compiles": full,
            "per_compile_all_kernels": (full - base) / reps,
        }
        print(
            f"callgrind {name}: {(full - base) / reps / 1e6:.1f} M instructions per compile of the {len(KERNELS)} kernels",
            flush=True,
        )
    return out


def _counted(site: Path, reps: int, target: str, path: Path) -> Path:
    run_child(site, reps, target, callgrind=path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--wheel", action="append", default=[], metavar="NAME=WHEEL", help="two of them: the first over the second"
    )
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--callgrind", action="store_true", help="also count instructions with valgrind's callgrind")
    ap.add_argument("--callgrind-reps", type=int, default=3)
    ap.add_argument("--target", default="sm_90", help="sm_XX to generate PTX for (no GPU needed)")
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print("RESULT " + json.dumps(child(a.child, a.target)), flush=True)
        return 0
    if len(a.wheel) != 2 or not all("=" in w for w in a.wheel):
        ap.error("give two wheels: --wheel NAME=PATH --wheel NAME=PATH")
    wheels = {n: Path(p) for n, p in (w.split("=", 1) for w in a.wheel)}
    for n, p in wheels.items():
        if not p.is_file():
            ap.error(f"--wheel {n}={p}: no such file")
    if a.callgrind and shutil.which("valgrind") is None:
        ap.error("--callgrind needs valgrind (Debian: apt-get install valgrind)")
    work = Path(tempfile.mkdtemp(prefix="tilec-llvm-builds-"))
    sites = {n: install(p, work / n) for n, p in wheels.items()}
    first, second = list(wheels)
    res: dict[str, Any] = {
        "bench": "llvm-builds",
        "machine": cpu_machine(),
        "wheels": {
            n: {"file": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for n, p in wheels.items()
        },
        "method": {"stages": list(LLVM_STAGES), "rounds": a.rounds, "reps": a.reps, "target": a.target},
    }
    res["wall"] = wall_rounds(sites, a.rounds, a.reps, a.target)
    rows = [
        [f"{k}: {'+'.join(LLVM_STAGES)} (ms, median of {a.rounds} rounds)", res["wall"][first][k]["median_s"] * 1e3,
         res["wall"][second][k]["median_s"] * 1e3, res["wall"][first][k]["median_s"] / res["wall"][second][k]["median_s"]]
        for k in KERNELS
    ]  # fmt: skip
    if a.callgrind:
        res["instructions"] = instructions(sites, a.callgrind_reps, a.target, work)
        i1, i2 = (res["instructions"][n]["per_compile_all_kernels"] for n in (first, second))
        rows.append(["all three kernels: instructions (M, callgrind)", i1 / 1e6, i2 / 1e6, i1 / i2])
    res["ratios"] = [dict(zip(("what", first, second, "ratio"), r, strict=True)) for r in rows]
    path = lib.out_dir(a.out) / "bench-llvm-builds.json"
    lib.write_json(path, res)
    print(f"wrote {path}")
    print(lib.table(["stages that run LLVM", first, second, f"{first}/{second}"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
