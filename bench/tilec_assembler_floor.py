"""Where nvPTXCompiler's time goes on tilec's bench kernels: the floor every compile pays, and the options. No GPU.

    PYTHONPATH=<a tilec site>:. python3 -m bench.tilec_assembler_floor [--out DIR] [--reps 15] [--target sm_90]

The library is the one tilec's `assembler="nvptxcompiler"` finds (TILEC_NVPTXCOMPILER, the CUDA toolkit, the
nvidia-nvptxcompiler wheel), called through tilec's own shim in this process, as tilec calls it. For an empty
kernel (what any compile pays) and each bench kernel (vadd, vadd_v8, expsin: tilec_kernels.py, lowered to PTX by
tilec once), the PTX -> cubin time (the fastest and the median of --reps) with tilec's options (`-O3 --verbose`)
and with others: without `--verbose` (tilec reads registers and spills from its report), with
`--split-compile=0` (a thread per CPU), -O2, -O1, -O0. Each variant's code sections (`.text.*`) are compared with
tilec's: only a variant whose code is the same would keep ptxas's exact code. Writes bench-assembler-floor.json and prints a table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

from bench import tilec_benchlib as lib

EMPTY = ".version 7.8\n.target {arch}\n.address_size 64\n.visible .entry empty()\n{{\n\tret;\n}}\n"
VARIANTS = {
    "tilec (-O3 --verbose)": ["-O3", "--verbose"],
    "-O3": ["-O3"],
    # ptxas's threads for its optimisations (0: one per CPU): the one option meant to cut the time
    # on a many-core runner; its help allows the code to change, which the comparison shows.
    "-O3 --split-compile=0": ["-O3", "--split-compile=0"],
    "-O2": ["-O2"],
    "-O1": ["-O1"],
    "-O0": ["-O0"],
}


def ptx_of(name: str, arch: str) -> str:
    import tilec

    from bench.tilec_compile import tilec_module, tilec_settings

    if name == "empty":
        return EMPTY.format(arch=arch)
    kernel = tilec.compile(tilec_module(name), target=f"cuda:{arch}", settings=tilec_settings(None))
    return str(kernel.asm["ptx"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--target", default="sm_90")
    args = ap.parse_args()
    from tilec.backends.cuda.cubin import sections as cubin_sections

    library, shim = lib.nvptxcompiler_shim()
    res: dict[str, Any] = {"bench": "tilec-assembler-floor", "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores", "target": args.target,
                           "nvptxcompiler": library.version, "reps": args.reps, "kernels": {}}
    print(f"nvPTXCompiler {library.version}, {args.target}, fastest / median of {args.reps} (ms)")
    ptxs = {name: ptx_of(name, args.target).encode() for name in ("empty", "vadd", "vadd_v8", "expsin")}
    for ptx in ptxs.values():  # warm up: the library's first compiles in a process are slower
        shim.compile(ptx, [f"--gpu-name={args.target}", "-O3"])
    for name, ptx in ptxs.items():
        rows: dict[str, Any] = {}
        reference = None
        for label, opts in VARIANTS.items():
            options = [f"--gpu-name={args.target}", *opts]
            times = []
            for _ in range(args.reps):
                t = time.perf_counter()
                rc, cubin, _info, error = shim.compile(ptx, options)
                times.append(time.perf_counter() - t)
                if rc != 0:
                    raise SystemExit(f"{name} {label}: nvPTXCompiler failed ({rc}): {error.strip()}")
            code = {k: v for k, v in cubin_sections(cubin).items() if k.startswith(".text")}
            reference = code if reference is None else reference
            rows[label] = {"fastest_ms": min(times) * 1e3, "median_ms": statistics.median(times) * 1e3,
                           "same_code_as_tilec": code == reference, "code_bytes": sum(map(len, code.values()))}
            print(f"  {name:8s} {label:24s} {rows[label]['fastest_ms']:6.2f} / {rows[label]['median_ms']:6.2f}"
                  f"  code {'same' if rows[label]['same_code_as_tilec'] else 'other'} ({rows[label]['code_bytes']} B)")
        res["kernels"][name] = {"ptx_lines": len(ptx.splitlines()), "variants": rows}
    lib.save(args.out, "bench-assembler-floor.json", res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
