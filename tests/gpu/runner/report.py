"""Write the GPU runner's JSON report from what runner.sh left in --out and --work.

Reads steps.jsonl (one line per step), facts.env (KEY=VALUE), the LLVM build
records (nvptx and support), the unpacked toolchain's marker, the pytest junit xml and the wheel; asks the machine for its GPU and
tool versions. Never fails on a missing piece: it records that the piece is
missing instead, so a report exists whatever step broke.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

SCHEMA = "hermetic.gpu-runner-report/1"


def sh(argv: list[str], env: dict[str, str] | None = None, timeout: int = 60) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return (proc.stdout or proc.stderr).strip()


def first_line(text: str | None) -> str | None:
    return text.splitlines()[0].strip() if text else None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def read_facts(path: Path) -> dict[str, str]:
    facts: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                facts[key] = value
    return facts


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def read_steps(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def machine() -> dict[str, Any]:
    out: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "arch": platform.machine(),
    }
    try:
        rel = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        out["os"] = rel.get("PRETTY_NAME", "").strip('"')
    except OSError:
        pass
    q = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"])
    gpus = []
    for line in (q or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2], "compute_capability": parts[3]})
    out["gpus"] = gpus
    out["gpu"] = gpus[0]["name"] if gpus else None
    out["driver"] = gpus[0]["driver"] if gpus else None
    m = re.search(r"CUDA Version:\s*([0-9.]+)", sh(["nvidia-smi"]) or "")
    out["cuda_driver_api"] = m.group(1) if m else None
    return out


PY_PACKAGES = ("tilec", "torch", "cuda-bindings", "llvmlite", "numpy", "pytest", "scikit-build-core", "nanobind", "pip")


def py_versions(python: str) -> dict[str, str | None]:
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {'python': sys.version.split()[0], 'executable': sys.executable}\n"
        f"for n in {PY_PACKAGES!r}:\n"
        "    try: out[n] = m.version(n)\n"
        "    except Exception: out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    text = sh([python, "-c", code], env=env)
    if not text:
        return {}
    try:
        return dict(json.loads(text.splitlines()[-1]))
    except json.JSONDecodeError:
        return {}


def tool_versions(facts: dict[str, str], work: Path, repo: Path) -> dict[str, Any]:
    py = facts.get("PY") or sys.executable
    ptxas = facts.get("PTXAS") or "ptxas"
    v: dict[str, Any] = {
        "hermetic": None,
        "conan": first_line(sh([str(work / "bin" / "conan"), "--version"])),
        "cmake": first_line(sh(["cmake", "--version"])),
        "ninja": first_line(sh(["ninja", "--version"])),
        "gcc": first_line(sh(["gcc", "--version"])),
        "gxx": first_line(sh(["g++", "--version"])),
        "ptxas": (sh([ptxas, "--version"]) or "").splitlines()[-2:] or None,
        "nvcc": ((sh(["nvcc", "--version"]) or "").splitlines()[-2:] or None),
        "git_commit": facts.get("COMMIT"),
    }
    env = dict(os.environ, PYTHONPATH=str(repo / "src"))
    v["hermetic"] = first_line(sh([py, "-c", "import hermetic; print(hermetic.__version__)"], env=env))
    venv_py = work / "venv" / "bin" / "python"
    v["venv"] = py_versions(str(venv_py)) if venv_py.exists() else None
    v["host_python"] = py_versions(py)
    v["tilec"] = (v["venv"] or {}).get("tilec")
    v["python"] = (v["venv"] or v["host_python"] or {}).get("python")
    prefix = facts.get("LLVM_PREFIX")
    if prefix:
        cfg = Path(prefix) / "lib" / "cmake" / "llvm" / "LLVMConfigVersion.cmake"
        m = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', cfg.read_text()) if cfg.is_file() else None
        v["llvm"] = m.group(1) if m else None
    else:
        v["llvm"] = None
    return v


def llvm_summary(record_path: Path) -> dict[str, Any] | None:
    if not record_path.is_file():
        return None
    rec = json.loads(record_path.read_text())
    tree = rec.get("tree", {})
    files = tree.get("files", [])
    return {
        # where the record is committed beside the report
        "record": f"reports/llvm-{rec['variant']}-record.json" if rec.get("variant") in ("nvptx", "support") else None,
        "variant": rec.get("variant"),
        "version": rec.get("recipe", {}).get("version"),
        "prefix": rec.get("prefix"),
        "inputs_digest": rec.get("inputs_digest"),
        "tree_digest": tree.get("digest"),
        "tree_size": tree.get("size"),
        "tree_entries": len(files),
        "tree_files": sum(1 for f in files if f.get("type") == "file"),
        "build_commands": rec.get("build_commands"),
        "wall_time_s": rec.get("wall_time_s"),
        "jobs": rec.get("jobs"),
        "offline": rec.get("offline"),
        "toolchain": rec.get("toolchain"),
        # the pinned compiler's identity (absent: a host build)
        "toolchain_id": rec.get("toolchain_id") or {"name": "host", "kind": "host"},
        "source_archive": rec.get("source_archive"),
        "test_package": rec.get("test_package"),
    }


def variants(summaries: list[dict[str, Any] | None], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per built variant, the digests and times a reader compares across runs and machines."""
    step_of = {"support": "build-support"}
    walls = {s["name"]: s.get("wall_s") for s in steps}
    out: dict[str, Any] = {}
    for s in summaries:
        if s is None or not s.get("variant"):
            continue
        name = s["variant"]
        out[name] = {
            "tree_digest": s["tree_digest"],
            "inputs_digest": s["inputs_digest"],
            "toolchain_id": s["toolchain_id"],
            "wall_time_s": s["wall_time_s"],
            "step_wall_s": walls.get(step_of.get(name, "build-llvm")),
        }
    return out


def toolchain_used(facts: dict[str, str], work: Path) -> dict[str, Any]:
    """What was asked for, and where the unpacked zig tree came from (the wheel or its slim archive)."""
    unpacked = []
    for mark in sorted((work / "cache" / "toolchains" / "unpacked").glob("*/.hermetic-unpacked.json")):
        try:
            data = json.loads(mark.read_text())
        except (OSError, ValueError):
            continue
        unpacked.append({"dir": mark.parent.name, "tree": data.get("tree"), "wheel_sha256": data.get("sha256"),
                         "from": data.get("from")})
    slim = None
    mirror = facts.get("MIRROR")
    if mirror and (Path(mirror) / "slim.json").is_file():
        try:
            meta = json.loads((Path(mirror) / "slim.json").read_text())
            slim = {k: meta.get(k) for k in ("file", "sha256", "size")}
        except (OSError, ValueError):
            slim = None
    return {
        "requested": facts.get("TOOLCHAIN") or None,
        "mirror": mirror or None,
        "mirror_slim": slim,
        "build_wheelhouse": facts.get("BUILD_WHEELHOUSE") or None,
        "unpacked": unpacked,
    }


def junit(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    root = ET.parse(path).getroot()
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failing: list[str] = []
    skipped: list[dict[str, str]] = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
            failing.append(name)
        elif "error" in kinds:
            counts["errors"] += 1
            failing.append(name)
        elif "skipped" in kinds:
            counts["skipped"] += 1
            el = case.find("skipped")
            skipped.append({"test": name, "reason": (el.get("message") if el is not None else "") or ""})
        else:
            counts["passed"] += 1
    return {"total": sum(counts.values()), **counts, "failing": failing, "skipped_tests": skipped}


# The stages of a cold compile that run the LLVM under test: llvmlite prints the IR (ir_text) and
# ptxas assembles (cubin) with the same bits whichever LLVM the wheel holds.
LLVM_STAGES = ("llir", "llir_opt", "ptx")


def _cold_runs(out: Path, name: str, part: str = "cold_tilec") -> list[dict[str, Any]]:
    """bench/tilec_compile.py's cold_tilec (or `part`) of every round with NAME's wheel (one run: cold-NAME/
    itself)."""
    base = out / f"cold-{name}"
    paths = sorted(base.glob("round-*/bench-compile.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not paths and (base / "bench-compile.json").is_file():
        paths = [base / "bench-compile.json"]
    return [json.loads(p.read_text()).get(part) or {} for p in paths]


def _cold_summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kernel: the median of every round's cold IR->cubin samples pooled, and the median over rounds
    of the LLVM stages' sum (each round's stage medians)."""
    kernels = sorted({k for run in runs for k, v in run.items() if isinstance(v, dict) and "cold_s" in v})
    summary: dict[str, dict[str, Any]] = {}
    for k in kernels:
        samples = [x for run in runs if k in run for x in run[k]["cold_s"].get("samples", [])]
        stages = [
            sum(run[k]["stages_s"][s] for s in LLVM_STAGES)
            for run in runs
            if k in run and all(isinstance(run[k].get("stages_s", {}).get(s), float) for s in LLVM_STAGES)
        ]
        summary[k] = {
            "cold_s": statistics.median(samples) if samples else None,
            "cold_samples": len(samples),
            "llvm_stages_s": statistics.median(stages) if stages else None,
            "rounds": len(stages),
        }
    return summary


def _ratios(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]], field: str) -> dict[str, float]:
    return {k: round(a[k][field] / b[k][field], 3) for k in a if a[k].get(field) and (b.get(k) or {}).get(field)}


def compare_host(out: Path, pinned: dict[str, Any] | None, host: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The pinned toolchain's build against the host compiler's, on this machine in this run (ratios: pinned/host)."""
    if host is None:
        return None
    a, b = (pinned or {}).get("wall_time_s"), host.get("wall_time_s")
    runs_pinned, runs_host = _cold_runs(out, name), _cold_runs(out, "host")
    cold_pinned, cold_host = _cold_summary(runs_pinned), _cold_summary(runs_host)
    return {
        "toolchains": {"pinned": name, "other": "host"},
        "llvm_wall_time_s": {"pinned": a, "host": b},
        "llvm_build_ratio": round(a / b, 3) if a and b else None,
        "host_tree_digest": host.get("tree_digest"),
        "cold_rounds": {"pinned": len(runs_pinned), "host": len(runs_host)},
        "cold_compile_median_s": {
            "pinned": {k: v["cold_s"] for k, v in cold_pinned.items()},
            "host": {k: v["cold_s"] for k, v in cold_host.items()},
        },
        "cold_compile_ratio": _ratios(cold_pinned, cold_host, "cold_s"),
        "llvm_stages_median_s": {
            "stages": list(LLVM_STAGES),
            "pinned": {k: v["llvm_stages_s"] for k, v in cold_pinned.items()},
            "host": {k: v["llvm_stages_s"] for k, v in cold_host.items()},
        },
        "llvm_stages_ratio": _ratios(cold_pinned, cold_host, "llvm_stages_s"),
        "goal": "cold compile with the pinned toolchain's LLVM at most 1.05x the host-built LLVM's",
    }


def cold_ab(out: Path) -> dict[str, Any] | None:
    """--cold-ab: tilec's cold compile with this wheel and with the baseline's, taking turns on this machine
    (ratios: this/baseline, and each against Triton's cold compile in the same rounds)."""
    runs_this, runs_base = _cold_runs(out, "this"), _cold_runs(out, "baseline")
    if not runs_this and not runs_base:
        return None
    this, base = _cold_summary(runs_this), _cold_summary(runs_base)
    triton = _cold_summary(_cold_runs(out, "this", "cold_triton") + _cold_runs(out, "baseline", "cold_triton"))
    # Triton's kernel each of tilec's is measured against (bench/tilec_compile.py's ratios)
    against = {k: "vadd" if k.startswith("vadd") else k for k in {**this, **base}}
    return {
        "rounds": {"this": len(runs_this), "baseline": len(runs_base)},
        "cold_compile_median_s": {
            "this": {k: v["cold_s"] for k, v in this.items()},
            "baseline": {k: v["cold_s"] for k, v in base.items()},
            "triton": {k: v["cold_s"] for k, v in triton.items()},
        },
        "cold_compile_ratio": _ratios(this, base, "cold_s"),
        "against_triton": {
            name: {k: round(v["cold_s"] / triton[t]["cold_s"], 3) for k, v in side.items()
                   if v.get("cold_s") and (t := against[k]) in triton and triton[t].get("cold_s")}
            for name, side in (("this", this), ("baseline", base))
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--exit-code", type=int, required=True)
    args = ap.parse_args()
    out, work = args.out, args.work
    facts = read_facts(out / "facts.env")
    steps = read_steps(out / "steps.jsonl")

    source: dict[str, Any] = {"path": facts.get("SOURCE"), "sha256": facts.get("SOURCE_SHA256") or None}
    if facts.get("SOURCE"):
        src = Path(facts["SOURCE"])
        source["file"] = src.name
        source["size"] = int(facts["SOURCE_SIZE"]) if facts.get("SOURCE_SIZE") else None
        meta = src.with_name("pruned.json")
        if meta.is_file():
            pj = json.loads(meta.read_text())
            source["pruned_json_sha256"] = pj.get("sha256")
            source["matches_pruned_json"] = pj.get("sha256") == source["sha256"]
            source["from"] = pj.get("from")

    wheel: dict[str, Any] | None = None
    if facts.get("WHEEL") and Path(facts["WHEEL"]).is_file():
        w = Path(facts["WHEEL"])
        wheel = {"file": w.name, "sha256": sha256(w), "size": w.stat().st_size}

    wrec_path = out / "wheel-record.json"
    if wheel is not None and wrec_path.is_file():
        wrec = json.loads(wrec_path.read_text())
        wheel["record"] = {
            k: wrec.get(k)
            for k in (
                "tag",
                "platform_tag",
                "glibc_required",
                "symbol_versions",
                "python",
                "llvm",
                "offline",
                "timings_s",
                "build_requirements",
                "sha256",
            )
        }
        wheel["sha256_matches_record"] = wrec.get("sha256") == wheel["sha256"]

    ptxas_txt = out / "ptxas.txt"
    ptx = out / "kernel.sm_80.ptx"
    ptxas = {
        "ptxas": facts.get("PTXAS") or None,
        "arch": "sm_80",
        "ptx": "reports/llvm-nvptx-test-package.ptx" if ptx.is_file() else None,
        "ptx_sha256": sha256(ptx) if ptx.is_file() else None,
        "cubin_size": int(facts["CUBIN_SIZE"]) if facts.get("CUBIN_SIZE") else None,
        "output": ptxas_txt.read_text().strip().splitlines() if ptxas_txt.is_file() else None,
    }

    pack = None
    if facts.get("PACK_SHA256"):
        parts = []
        name = facts.get("PACK_NAME", "llvm-nvptx-install.tar.xz")
        listing = out / name.replace(".tar.xz", ".parts.sha256")
        if listing.is_file():
            for line in listing.read_text().splitlines():
                digest, part = line.split(maxsplit=1)
                parts.append({"file": part.strip(), "sha256": digest})
        pack = {
            "file": name,
            "sha256": facts["PACK_SHA256"],
            "size": int(facts.get("PACK_SIZE", "0")),
            "parts": parts,
            "reassemble": f"cat {name}.part-* > {name} && sha256sum {name}",
        }

    failures = []
    for s in steps:
        if s.get("status") == "failed":
            log = work / "logs" / f"{s['name']}.log"
            tail = log.read_text(errors="replace").splitlines()[-40:] if log.is_file() else []
            failures.append({"step": s["name"], "rc": s.get("rc"), "output_tail": tail})
    tests = junit(out / "junit.xml")
    llvm = llvm_summary(out / "record.json")
    llvm_support = llvm_summary(out / "support-record.json")
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "started": facts.get("STARTED"),
        "finished": facts.get("FINISHED"),
        "result": "passed" if args.exit_code == 0 else "failed",
        "exit_code": args.exit_code,
        "failures": failures,
        "machine": machine(),
        "versions": tool_versions(facts, work, args.repo),
        "jobs": int(facts["JOBS"]) if facts.get("JOBS", "").isdigit() else facts.get("JOBS"),
        "offline": {
            "requested": facts.get("OFFLINE"),
            "fallback": facts.get("OFFLINE_FALLBACK") or None,
        },
        "steps": steps,
        "step_wall_s": {s["name"]: s.get("wall_s") for s in steps},
        "source": source,
        "toolchain": toolchain_used(facts, work),
        "llvm": llvm,
        "llvm_support": llvm_support,
        "variants": variants([llvm_support, llvm], steps),
        "ptxas_check": ptxas,
        "wheel_command_present": facts.get("HAVE_WHEEL_CMD") == "1",
        "wheelhouse": facts.get("WHEELHOUSE") or None,
        "wheel": wheel,
        "tests": tests,
        "install_tree_archive": pack,
        # bench/toolchain_build.py's result when the runner ran with --bench
        "bench_toolchain": next((json.loads(b.read_text()) for b in sorted(out.glob("toolchain-build-*.json"))), None),
        # --llvmlite: llvmlite's own test suite against the variant (unittest_summary.py)
        "llvmlite_tests": json.loads(lt.read_text()) | {"sdist": facts.get("LLVMLITE_SDIST")}
        if (lt := out / "llvmlite-tests.json").is_file() else None,
        # --numba: Numba from its sdist on that llvmlite, a @njit smoke test (numba_smoke.py)
        "numba_smoke": json.loads(ns.read_text()) | {"sdist": facts.get("NUMBA_SDIST"), "build_s": _int(facts.get("NUMBA_BUILD_S"))}
        if (ns := out / "llvmlite-numba-smoke.json").is_file() else None,
        # --llvmlite: its wheel by `hermetic wheel --recipe llvmlite`, built twice
        "llvmlite_wheel": {
            "builds": [{"wheel": facts.get(f"LLVMLITE_WHEEL_{n}"), "seconds": _int(facts.get(f"LLVMLITE_WHEEL_{n}_S"))}
                       for n in (1, 2) if facts.get(f"LLVMLITE_WHEEL_{n}")],
            "record": json.loads(lw.read_text()),
        } if (lw := out / "llvmlite-wheel-record.json").is_file() else None,
        "llvm_version": facts.get("LLVM_VERSION") or None,
        # --bench --bench-compare arch: the variant built natively and cross-built
        "bench_cross": next((json.loads(b.read_text()) for b in sorted(out.glob("cross-build-*.json"))), None),
        # --again: the wheel built a second time elsewhere
        "wheel_again": json.loads(again.read_text()) if (again := out / "wheel-again.json").is_file() else None,
        # --compare-host: the same variant with the host compiler, and tilec's cold compile with each LLVM
        "compare_host": compare_host(out, llvm, llvm_summary(out / "host-record.json"), facts.get("TOOLCHAIN") or "default"),
        # --cold-ab: tilec's cold compile beside the baseline's (--baseline-src)
        "cold_ab": cold_ab(out),
        # --tilec-bench: what bench/tilec_gpu.sh wrote
        "tilec_bench": sorted(p.name for p in (out / "tilec-bench").glob("*")) if (out / "tilec-bench").is_dir() else None,
    }
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out / "report.json")
    print(json.dumps({k: report[k] for k in ("result", "exit_code", "failures", "step_wall_s", "variants")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
