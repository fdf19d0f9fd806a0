"""Where one cold compile's time goes, cut up as it runs: the stages, and tilec's own work around them. No GPU.

    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_cold_parts [--reps 21] [--out DIR] [--target sm_90]

The cold bench times each stage alone, in runs of its own, so its stages' sum and its whole compile are taken
under different conditions. Here each cold compile (the cold bench's default row: the module built with
llvmlite, then `compile` with the default assembler into a fresh cache directory) runs through a Compiler whose
stages are the backend's own, each wrapped in a timer. Per kernel, the median over --reps of: the module
built, the whole `compile` call, each stage within it, and the rest of that call, what tilec does around the
stages (the options and the Compiler made, as `tilec.compile` makes them on every call, the IR printed and
hashed for the cache key, the cache looked up and written, the kernel object made).
The IR's printing is also timed alone on another module of the kernel (it is part of the rest).
Writes OUT/bench-cold-parts.json and prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib
from bench.tilec_compile import TILEC_KERNELS, tilec_module, tilec_settings


def timed_compiler_class() -> Any:
    """A tilec Compiler, made as `Timed(settings, times)`, whose stages are the backend's own, each timed into
    `times` (seconds, by stage). Made once per run, so no compile pays for making the class."""
    from tilec.compiler import Compiler

    class Timed(Compiler):
        def __init__(self, settings: Any, times: dict[str, float]) -> None:
            super().__init__(settings)
            self.times = times

        def _stages(self, backend: Any, target: Any, opts: Any) -> dict[str, Any]:
            def timed(name: str, stage: Any) -> Any:
                def run(src: Any, ctx: Any) -> Any:
                    t0 = time.perf_counter()
                    out = stage(src, ctx)
                    self.times[name] = time.perf_counter() - t0
                    return out

                return run

            return {name: timed(name, st) for name, st in super()._stages(backend, target, opts).items()}

    return Timed


def parts(name: str, target: str, reps: int, work: Path) -> dict[str, Any]:
    from tilec.cache.key import as_ir
    from tilec.kernel import CompileOptions

    timed = timed_compiler_class()
    samples: list[dict[str, float]] = []
    for i in range(reps + 1):  # the first compile of each kernel in the process is not a sample
        times: dict[str, float] = {}
        settings = tilec_settings(work / f"{name}-{i}")
        t0 = time.perf_counter()
        module = tilec_module(name)
        t1 = time.perf_counter()
        # as `tilec.compile` does on every call: the options, a Compiler (its cache, the backends), the compile
        kernel = timed(settings, times).compile(module, CompileOptions(target=target))
        t2 = time.perf_counter()
        if kernel.cache_status != "miss":
            raise SystemExit(f"{name}: a cold compile was a cache {kernel.cache_status}")
        other = tilec_module(name)
        t3 = time.perf_counter()
        as_ir(other)
        printed = time.perf_counter() - t3
        if i:
            stages = sum(times.values())
            samples.append({"module": t1 - t0, "compile": t2 - t1, **{f"stage:{k}": v for k, v in times.items()},
                            "stages": stages, "rest": t2 - t1 - stages, "ir_print_alone": printed})
    keys = list(samples[0])
    return {"assembler": kernel.metadata.assembler, "samples": samples,
            "median_s": {k: statistics.median(s[k] for s in samples) for k in keys}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--target", default="sm_90")
    args = ap.parse_args()
    res: dict[str, Any] = {"bench": "tilec-cold-parts", "machine": lib.machine(), "target": args.target,
                           "reps": args.reps, "kernels": {}}
    with tempfile.TemporaryDirectory(prefix="tilec-parts-") as tmp:
        parts("vadd", args.target, 2, Path(tmp) / "warm")  # the process's one-time costs out of the numbers
        for name in TILEC_KERNELS:
            res["kernels"][name] = parts(name, args.target, args.reps, Path(tmp))
    m = res["machine"]
    print(f"{m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores, {args.target}; medians of {args.reps} cold "
          f"compiles (ms)")
    stage_names = [k for k in res["kernels"]["vadd"]["median_s"] if k.startswith("stage:")]
    cols = ["module", "compile", *stage_names, "stages", "rest", "ir_print_alone"]
    rows = [[name, *(r["median_s"].get(c, 0.0) * 1e3 for c in cols)] for name, r in res["kernels"].items()]
    print(lib.table(["kernel", *(c.removeprefix("stage:") for c in cols)], rows))
    lib.save(args.out, "bench-cold-parts.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
