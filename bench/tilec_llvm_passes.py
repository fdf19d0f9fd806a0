"""Where tilec's LLVM stages spend a cold compile: each stage, its parsing and printing, and LLVM's pass timings.

    python3 -m bench.tilec_llvm_passes [--out DIR] [--reps 7] [--target sm_90] [--opt opt-19] [--llc llc-19]

No GPU. For the bench's kernels (vadd, vadd_v8, expsin: tilec_kernels.py), with the cache off:

- tilec's LLVM stages timed one by one as tilec.compile runs them (llir, llir_opt, ptx), and inside
  them the native calls on their own: parsing the IR text (each stage starts from the previous
  stage's text), linking libdevice, the -O3 pipeline (and -O2, -O1 beside it), printing, and PTX
  emission; each the fastest of --reps runs in this warm process (the least disturbed, on a
  shared machine);
- LLVM's own account of the same work (`-time-passes`) from `opt` and `llc` of the same LLVM release
  as tilec's core (Debian's opt-19/llc-19 beside llvm-19-dev): the pipeline on tilec's input to its
  optimize call (libdevice linked, the ftz flag set), and NVPTX code generation on its output.

Writes bench-llvm-passes.json into --out and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

KERNELS = ("vadd", "vadd_v8", "expsin")
_PCT = re.compile(r"[0-9.]+ \(\s*([0-9.]+)%\)")
_TOTAL = re.compile(r"Total Execution Time: [0-9.]+ seconds \(([0-9.]+) wall clock\)")


def module(name: str) -> Any:
    import tilec

    from bench import tilec_kernels as K

    return {"vadd": K.vadd_scalar, "vadd_v8": lambda T: K.vadd_vec(T, 2), "expsin": K.exp_sin_loop}[name](tilec.ir)


def median_ms(fn: Callable[[], Any], reps: int) -> float:
    """The fastest of `reps` runs (ms): on a shared machine the least disturbed one."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def tilec_parts(name: str, target: str, reps: int) -> tuple[dict[str, float], str, str]:
    """Stage times and the native calls inside them (ms), and the texts opt and llc get."""
    import tilec
    from tilec import native
    from tilec.backends.cuda import toolchain

    settings = tilec.Settings.from_env({**_env(), "TILEC_CACHE": "0"})
    c = tilec.Compiler(settings)
    opts = tilec.CompileOptions(target=target)
    stages = c.stages(opts)
    text = tilec.compiler._as_ir(module(name))

    def md() -> Any:
        return tilec.Metadata(name="", target=target, signature=(), llvm_version=tilec.llvm_version())

    llir = stages["llir"](text, md())
    opt_out = stages["llir_opt"](llir, md())
    out = {
        "stage llir (parse, verify, specialize, print)": median_ms(lambda: stages["llir"](text, md()), reps),
        "stage llir_opt": median_ms(lambda: stages["llir_opt"](llir, md()), reps),
        "stage ptx": median_ms(lambda: stages["ptx"](opt_out, md()), reps),
    }
    libdevice = str(toolchain.find_libdevice(settings))

    def prepared() -> Any:
        mod = native.NativeModule(llir)
        if any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions()):
            mod.link_internalized(libdevice)
        mod.set_module_flag("nvvm-reflect-ftz", 0)
        return mod

    out["  parse the llir text"] = median_ms(lambda: native.NativeModule(llir).close(), reps)
    out["  parse + link libdevice (where called)"] = median_ms(lambda: prepared().close(), reps)

    def optimize(level: int) -> float:
        mod = prepared()
        t0 = time.perf_counter()
        mod.optimize(target, "", level)
        took = time.perf_counter() - t0
        mod.close()
        return took

    for level in (3, 2, 1):
        out[f"  the -O{level} pipeline (optimize)"] = min(optimize(level) for _ in range(reps)) * 1e3
    with prepared() as mod:
        opt_in = mod.to_text()
        out["  print the optimized IR's input (to_text)"] = median_ms(mod.to_text, reps)
    out["  parse the llir_opt text"] = median_ms(lambda: native.NativeModule(opt_out).close(), reps)

    def emit(level: int) -> float:
        with native.NativeModule(opt_out) as mod:
            t0 = time.perf_counter()
            mod.emit_assembly(target, "", level)
            return time.perf_counter() - t0

    for level in (3, 2, 1):
        out[f"  PTX emission at -O{level} (emit_assembly)"] = min(emit(level) for _ in range(reps)) * 1e3
    return out, opt_in, opt_out


EMPTY = """target triple = "nvptx64-nvidia-cuda"
define void @k() {
  ret void
}
!nvvm.annotations = !{!0}
!0 = !{ptr @k, !"kernel", i32 1}
"""


def fixed_costs(target: str, reps: int) -> dict[str, float]:
    """The pipeline and PTX emission of a kernel that does nothing (ms): what every compile pays
    whatever its size (the target machine, the pass managers, the printer)."""
    from tilec import native

    def run(call: Callable[[Any], Any]) -> Callable[[], None]:
        def once() -> None:
            with native.NativeModule(EMPTY) as mod:
                call(mod)

        return once

    return {
        "the -O3 pipeline of an empty kernel": median_ms(run(lambda m: m.optimize(target, "", 3)), reps),
        "PTX emission of an empty kernel": median_ms(run(lambda m: m.emit_assembly(target, "", 3)), reps),
        "parse an empty kernel": median_ms(lambda: native.NativeModule(EMPTY).close(), reps),
    }


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def time_passes(cmd: list[str], ir: str) -> dict[str, Any]:
    """The tool's process time and its -time-passes reports: per report, the wall time and the
    passes by wall time (the report's own seconds have four decimals: its percentages of the
    wall clock are used instead)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.ll"
        src.write_text(ir)
        t0 = time.perf_counter()
        proc = subprocess.run([*cmd, "-time-passes", str(src)], capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    reports: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    lines = proc.stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("===-") and i + 1 < len(lines) and not lines[i + 1].startswith("===-"):
            title = lines[i + 1].strip()
            if title and not title.startswith("Total"):
                current = reports.setdefault(title, {"wall_ms": 0.0, "passes": {}})
            continue
        m = _TOTAL.search(line)
        if m and current is not None:
            current["wall_ms"] = float(m.group(1)) * 1e3
            continue
        pcts = _PCT.findall(line)
        if current is not None and len(pcts) >= 2 and current["wall_ms"]:
            name = _PCT.sub("", line).strip()
            if name and name != "Total":
                ms = float(pcts[-1]) / 100 * current["wall_ms"]
                current["passes"][name] = current["passes"].get(name, 0.0) + ms
    for rep in reports.values():
        rep["passes"] = sorted(rep["passes"].items(), key=lambda kv: -kv[1])[:10]
    return {"process_ms": wall * 1e3, "reports": reports}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("reports"))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--opt", default=shutil.which("opt-19") or "opt", help="LLVM 19's opt (optional)")
    ap.add_argument("--llc", default=shutil.which("llc-19") or "llc", help="LLVM 19's llc (optional)")
    a = ap.parse_args()
    res: dict[str, Any] = {"target": a.target, "reps": a.reps}
    triple = ["-mtriple=nvptx64-nvidia-cuda", f"-mcpu={a.target}"]
    res["fixed_ms"] = fixed_costs(a.target, a.reps)
    print(f"== fixed costs (ms, the fastest of {a.reps}; {a.target})")
    for label, ms in res["fixed_ms"].items():
        print(f"  {ms:8.3f}  {label}")
    for name in KERNELS:
        parts, opt_in, opt_out = tilec_parts(name, a.target, a.reps)
        res[name] = {"tilec_ms": parts}
        # opt and llc where they are (Debian's llvm-19; a GPU runner may have neither)
        if shutil.which(a.opt) and shutil.which(a.llc):
            res[name]["opt"] = time_passes([a.opt, *triple, "-passes=default<O3>", "-disable-output"], opt_in)
            res[name]["llc"] = time_passes([a.llc, *triple, "-O3", "-o", "/dev/null"], opt_out)
        print(f"\n== {name} (ms, the fastest of {a.reps}; {a.target})")
        for label, ms in parts.items():
            print(f"  {ms:8.3f}  {label}")
        for tool in ("opt", "llc"):
            if tool not in res[name]:
                print(f"  ({tool} not found: {getattr(a, tool)})")
                continue
            r = res[name][tool]
            print(f"  {tool} (its own process: {r['process_ms']:.1f} ms, mostly loading LLVM):")
            for title, rep in r["reports"].items():
                print(f"  {rep['wall_ms']:8.3f}    {title}, of which:")
                for pname, ms in rep["passes"][:6]:
                    print(f"  {ms:8.3f}      {pname}")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "bench-llvm-passes.json").write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nwrote {a.out / 'bench-llvm-passes.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
