"""Shared helpers of the tilec benchmarks: the machine's facts, statistics, stage-dump counts, JSON.

The benchmarks (tilec_compile.py, tilec_launch.py, tilec_bandwidth.py) run on a CUDA
machine with torch, Triton, cuda-bindings and an installed tilec wheel. Each prints a
short table of ratios last and writes one JSON report; tilec_report.py turns the
reports into markdown.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def stats(samples: Sequence[float]) -> dict[str, Any]:
    """Median (the figure we report), spread, and the samples themselves."""
    xs = sorted(samples)
    if not xs:
        return {"n": 0}
    q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else [xs[0]] * 9
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "p10": q[0],
        "p90": q[-1],
        "samples": list(samples),
    }


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _run(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return (proc.stdout + proc.stderr).strip()


def ptxas_version(path: str | None) -> str | None:
    if not path:
        return None
    m = re.search(r"V(\d+\.\d+\.\d+)", _run([path, "--version"]))
    return m.group(1) if m else None


def triton_ptxas() -> str | None:
    try:
        from triton import knobs

        return str(knobs.nvidia.ptxas.path)
    except Exception:
        return None


def machine() -> dict[str, Any]:
    """GPU, driver, CPU and package versions: every report names the machine it ran on (the GPU's
    figures where torch is there; the benches with no GPU run without it)."""
    try:
        import torch
    except ImportError:
        torch = None

    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                            "libc": " ".join(platform.libc_ver())}
    if torch is not None and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = p.name
        info["gpu_sm_count"] = p.multi_processor_count
        info["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        info["compute_capability"] = f"{p.major}.{p.minor}"
        info["gpu_l2_mib"] = round(getattr(p, "L2_cache_size", 0) / 2**20, 1)
    smi = _run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem",
            "--format=csv,noheader",
        ]
    )
    info["nvidia_smi"] = smi.splitlines()[0] if smi else None
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu = platform.processor()
    info["cpu"] = cpu
    info["cpu_count"] = os.cpu_count()
    info["torch"] = torch.__version__ if torch is not None else None
    info["torch_cuda"] = torch.version.cuda if torch is not None else None
    for dist in ("triton", "tilec", "llvmlite", "cuda-bindings", "numpy"):
        info[dist] = _version(dist)
    try:
        import tilec
        from tilec.backends.cuda import CudaBackend

        info["tilec_llvm"] = tilec.llvm_version()
        ptxas = CudaBackend.ptxas(tilec.Settings.from_env())
        info["tilec_ptxas"] = str(ptxas.path) if ptxas else None
        info["tilec_ptxas_version"] = ptxas.version if ptxas else None
        with contextlib.suppress(Exception):  # absent from older tilecs
            from tilec.backends.cuda import toolchain

            found = toolchain.identity(tilec.Settings.from_env()).get("nvptxcompiler")
            info["tilec_nvptxcompiler"] = f"{found[1]} ({found[0]})" if found else "none found"
    except Exception as exc:  # the report says what failed rather than dying here
        info["tilec_error"] = repr(exc)
    try:
        from cuda.bindings import nvjitlink

        info["nvjitlink"] = ".".join(map(str, nvjitlink.version()))
    except Exception as exc:
        info["nvjitlink"] = f"unavailable: {exc!r}"
    tp = triton_ptxas()
    info["triton_ptxas"] = tp
    info["triton_ptxas_version"] = ptxas_version(tp)
    info["commit"] = os.environ.get("BENCH_COMMIT", "unknown")
    info["tilec_wheel"] = os.environ.get("BENCH_TILEC_WHEEL", "unknown")
    return info


def loaded_nvjitlink() -> dict[str, Any]:
    """Which libnvJitLink this process loaded (the file, and the wheel it came from if any)."""
    out: dict[str, Any] = {}
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libnvJitLink" in line}
    except OSError:
        paths = set()
    if paths:
        path = sorted(paths)[0]
        out["path"] = path
        out["file"] = os.path.basename(os.path.realpath(path))
    for dist in ("nvidia-nvjitlink", "nvidia-nvjitlink-cu13", "nvidia-nvjitlink-cu12"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


def nvptxcompiler_shim() -> tuple[Any, Any]:
    """(library, shim): the nvPTXCompiler library tilec's `assembler="nvptxcompiler"` finds, and tilec's own shim
    of it loaded in this process, to assemble PTX as tilec does. SystemExit where there is none."""
    import tilec
    from tilec.backends.cuda import nvptxcompiler as N

    settings = tilec.Settings.from_env()
    archive = N.find(settings)
    if archive is None:
        raise SystemExit(f"no nvPTXCompiler library found: {N.INSTALL}")
    library = N.library(archive, *N.describe(archive))
    return library, N.load(library, settings, None)


def sm_target() -> str:
    """tilec's target for device 0 (sm_90 on Hopper)."""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return f"sm_{major}{minor}"


_MEM_OP = re.compile(r"\b((?:ld|st)\.(?:global|shared|local|param)[\w.]*)")


def ptx_ops(ptx: str) -> dict[str, int]:
    """How many of each global/shared/local load and store form the PTX has (ld.global.v4.f32...)."""
    found = Counter(m.group(1) for m in _MEM_OP.finditer(ptx))
    return {k: v for k, v in sorted(found.items()) if not k.startswith(("ld.param", "st.param"))}


_SASS_OP = re.compile(r"\b((?:LDG|STG|LDS|STS|LDL|STL)(?:\.[A-Z0-9_]+)*)\b")


def sass_ops(cubin: bytes) -> dict[str, int] | str:
    """Load/store forms in the SASS (LDG.E.128 is a 16-byte load), through cuobjdump if present."""
    tool = shutil.which("cuobjdump") or (
        "/usr/local/cuda/bin/cuobjdump" if Path("/usr/local/cuda/bin/cuobjdump").exists() else None
    )
    if tool is None:
        return "cuobjdump not found"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = _run([tool, "-sass", f.name])
    found = Counter(m.group(1) for m in _SASS_OP.finditer(out))
    return dict(sorted(found.items()))


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        if abs(v) >= 0.1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


def verdict(value: float | None, goal: float, lower_is_better: bool = True) -> str:
    if value is None:
        return "not measured"
    ok = value <= goal if lower_is_better else value >= goal
    return "met" if ok else "missed"


@contextlib.contextmanager
def section(name: str, errors: dict[str, str]) -> Iterator[None]:
    """Run one part of a benchmark; a failure is recorded (with its traceback) and the rest goes on."""
    import traceback

    print(f"== {name}", flush=True)
    try:
        yield
    except Exception:
        tb = traceback.format_exc()
        errors[name] = tb
        print(f"!! {name} failed:\n{tb}", flush=True)


def out_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = os.environ.get("OUT")
    return Path(env) if env else HERE.parent / "reports"


def save(arg: str | None, name: str, obj: Any) -> Path:
    """`obj` written as JSON to `name` in the report directory (`out_dir(arg)`), and where it went said."""
    path = out_dir(arg) / name
    write_json(path, obj)
    print(f"wrote {path}")
    return path
