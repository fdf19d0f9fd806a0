"""PTX -> cubin with ptxas and with nvJitLink, on the same PTX: SASS, registers, spills, local memory.

    python bench/tilec_assembler.py [--out DIR] [--reps 7] [--target sm_90]

tilec keeps ptxas as its default assembler until nvJitLink (`assembler="nvjitlink"`) is shown
to give the same code. For each bench kernel (tilec_kernels.py: vector adds, the exp/sin loop,
row sums) and the `sinf` case (libdevice's __nv_sinf alone, whose slow path uses local memory),
the kernel is lowered to PTX once, and that PTX is assembled by:

- ptxas, as tilec runs it (`-arch=sm_XX -O3 -v`);
- nvJitLink, as tilec runs it (`-arch=sm_XX -O3 -Xptxas=-v`), and with variants of its options,
  to find which one makes a difference;
- Triton's bundled ptxas where Triton is installed (another ptxas version, same flags).

The cubins are compared with `cuobjdump -sass` (instructions only: addresses, encodings and
comments dropped), per-opcode counts with local loads/stores (LDL/STL) called out, and
`cuobjdump -res-usage` (REG, STACK, SHARED, LOCAL), beside each assembler's own report (ptxas
-v; nvJitLink's info log). Each assembler is timed on the PTX (median of --reps). With torch
and a GPU, tilec kernels built with each assembler are launched on the same inputs and their
outputs compared bit for bit. Writes bench-assembler.json and bench-assembler.md.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tilec_benchlib as lib

# nvJitLink option sets tried beside tilec's own (the first), to see what changes the code.
NVJITLINK_VARIANTS: dict[str, list[str]] = {
    "tilec (-O3 -Xptxas=-v)": [],  # nvjitlink.options(...) as tilec passes them
    "no -O": ["drop:-O3"],
    "-Xptxas=-O3": ["-Xptxas=-O3"],
    "-ftz=1": ["-ftz=1"],
    "-lto": ["-lto"],
}


def sinf_module(T: Any) -> Any:
    """y[i] = sinf(x[i]): the libdevice function whose slow path (Payne-Hanek) uses local memory."""
    import llvmlite.ir as ir

    f32 = ir.FloatType()
    m = T.new_module("sinf")
    fn = T.kernel(m, "sinf_only", [T.ptr(), T.ptr(), T.i32], ["x", "y", "n"])
    x, y, n = fn.args
    sinf = T.libdevice(m, "__nv_sinf", f32, [f32])
    entry, body, done = (fn.append_basic_block(s) for s in ("entry", "body", "done"))
    b = ir.IRBuilder(entry)
    i = T.global_index(b)
    b.cbranch(b.icmp_signed("<", i, n), body, done)
    b.position_at_end(body)
    T.store(b, b.call(sinf, [T.load(b, x, i, f32)]), y, i)
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return m


def modules() -> dict[str, Callable[[], Any]]:
    import tilec

    import tilec_kernels as K

    T = tilec.ir
    return {
        "vadd": lambda: K.vadd_scalar(T),
        "vadd_v4": lambda: K.vadd_vec(T, 1),
        "vadd_v8": lambda: K.vadd_vec(T, 2),
        "expsin": lambda: K.exp_sin_loop(T),
        "rowsum_u1": lambda: K.row_sum(T, 1),
        "rowsum_u2": lambda: K.row_sum(T, 2),
        "sinf": lambda: sinf_module(T),
    }


_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_OPCODE = re.compile(r"^(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_RES = re.compile(r"(\w+(?:\[\d+\])?):(\d+)")


def _cuobjdump(tool: str | None, cubin: bytes, *flags: str) -> str:
    if tool is None:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([tool, *flags, f.name], capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump {' '.join(flags)} failed: {proc.stderr[-500:]}")
    return proc.stdout


def sass(tool: str | None, cubin: bytes) -> list[str]:
    """The instructions of `cuobjdump -sass`, without addresses, encodings or comments."""
    return [m.group(1) for m in _INSTR.finditer(_cuobjdump(tool, cubin, "-sass"))]


def res_usage(tool: str | None, cubin: bytes) -> dict[str, int]:
    """`cuobjdump -res-usage`: REG, STACK, SHARED, LOCAL, ... of the (only) kernel."""
    out = _cuobjdump(tool, cubin, "-res-usage")
    return {k: int(v) for k, v in _RES.findall(out)}


def opcodes(instrs: list[str]) -> dict[str, int]:
    found = Counter(m.group(1) for i in instrs if (m := _OPCODE.match(i)))
    return dict(sorted(found.items()))


def describe(tool: str | None, cubin: bytes, log: str, name: str) -> dict[str, Any]:
    from tilec.backends.cuda.ptxas import parse_verbose

    instrs = sass(tool, cubin)
    ops = opcodes(instrs)
    reported = parse_verbose(log).get(name)
    return {
        "cubin_bytes": len(cubin),
        "sass_instructions": len(instrs) if tool is not None else "no cuobjdump",
        "local_loads_stores": {k: v for k, v in ops.items() if k.startswith(("LDL", "STL"))},
        "opcodes": ops,
        "res_usage": res_usage(tool, cubin),
        "assembler_report": reported.__dict__ if reported is not None else None,
        "log_tail": log[-1500:],
        "_sass": instrs,
    }


def nvjitlink_with(ptx: str, arch: str, variant: list[str]) -> tuple[bytes, str]:
    """nvJitLink with tilec's options changed by `variant` ("drop:X" removes X, else added)."""
    from tilec.backends.cuda import nvjitlink

    opts = nvjitlink.options(arch, (), 3)
    for v in variant:
        if v.startswith("drop:"):
            opts = [o for o in opts if o != v[len("drop:") :]]
        else:
            opts.append(v)
    return nvjitlink.assemble(ptx, arch, opts=opts)


def median_time(fn: Callable[[int], Any], reps: int) -> dict[str, Any]:
    samples = []
    for r in range(reps):
        t0 = time.perf_counter()
        fn(r)
        samples.append(time.perf_counter() - t0)
    return lib.stats(samples)


def compare(kernel: str, build: Callable[[], Any], arch: str, reps: int, settings: Any, cuobjdump: str | None) -> dict[str, Any]:
    import tilec
    from tilec.backends.cuda import CudaBackend, nvjitlink, ptxas

    k = tilec.compile(build(), target=arch, settings=settings, use_ptxas=False)
    ptx = k.asm["ptx"]
    name = k.name
    out: dict[str, Any] = {"entry": name, "ptx_lines": ptx.count("\n"), "assemblers": {}}
    found = CudaBackend.ptxas(settings)
    candidates: dict[str, Callable[[str], tuple[bytes, str]]] = {}
    if found is not None:
        candidates[f"ptxas {found.version} (tilec's default)"] = lambda p: ptxas.assemble(found.path, p, arch, (), 3)
    triton = lib.triton_ptxas()
    if triton and Path(triton).is_file():
        candidates[f"ptxas {lib.ptxas_version(triton)} (Triton's)"] = lambda p: ptxas.assemble(Path(triton), p, arch, (), 3)
    try:
        version = nvjitlink.version()
        for label, variant in NVJITLINK_VARIANTS.items():
            candidates[f"nvJitLink {version}: {label}"] = lambda p, v=variant: nvjitlink_with(p, arch, v)
    except tilec.ToolNotFoundError as exc:
        out["nvjitlink_error"] = str(exc)
    reference: list[str] | None = None
    for label, assemble in candidates.items():
        try:
            cubin, log = assemble(ptx)
            info = describe(cuobjdump, cubin, log, name)
            # A comment makes each PTX unique, so that nothing inside the assembler can reuse work.
            info["time_s"] = median_time(lambda r, a=assemble: a(ptx + f"\n// rep {r}\n"), reps)
        except Exception as exc:
            out["assemblers"][label] = {"error": repr(exc)[-2000:]}
            continue
        instrs = info.pop("_sass")
        if reference is None:
            reference = instrs
            info["sass_equal_to_first"] = True
        else:
            info["sass_equal_to_first"] = instrs == reference
            if instrs != reference:
                diff = list(difflib.unified_diff(reference, instrs, "first", label, lineterm="", n=1))
                info["sass_diff_head"] = diff[:80]
        out["assemblers"][label] = info
    return out


def run_on_gpu(arch: str, settings: Any) -> dict[str, Any]:
    """Launch the kernels tilec_compile knows, built with each assembler, on the same inputs."""
    import tilec
    import torch

    import tilec_compile as C

    out: dict[str, Any] = {}
    for kernel in C.TILEC_KERNELS:
        t = C.inputs(kernel)
        results = {}
        for assembler in ("ptxas", "nvjitlink"):
            k = tilec.compile(C.tilec_module(kernel), target=arch, settings=settings, assembler=assembler)
            for name, v in t.items():
                if name in ("out", "y"):
                    v.fill_(float("nan"))
            C.tilec_launch(k, kernel, t)
            results[assembler] = C.check(kernel, t)
            results[f"{assembler}_output"] = next(v.clone() for n, v in t.items() if n in ("out", "y"))
        out[kernel] = {
            "rel_err_ptxas": results["ptxas"],
            "rel_err_nvjitlink": results["nvjitlink"],
            "outputs_bit_equal": bool(torch.equal(results["ptxas_output"], results["nvjitlink_output"])),
        }
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# PTX -> cubin: ptxas against nvJitLink",
        "",
        "Produced by `bench/tilec_assembler.py`. Raw numbers: [bench-assembler.json](bench-assembler.json).",
        "",
        *[f"- {k}: {str(v).strip()}" for k, v in res["machine"].items() if not isinstance(v, dict)],
        "",
    ]
    for kernel, r in res.get("kernels", {}).items():
        lines += [f"## `{kernel}` (entry `{r.get('entry')}`, {r.get('ptx_lines')} PTX lines)", ""]
        if r.get("nvjitlink_error"):
            lines += [f"nvJitLink unavailable: {r['nvjitlink_error'].strip()}", ""]
        lines += [
            "| assembler | SASS = first row | instructions | REG | STACK | LOCAL | spill st/ld (own report) | LDL/STL | ms |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for label, a in r.get("assemblers", {}).items():
            if "error" in a:
                lines.append(f"| {label} | error: {a['error'][:200]} | | | | | | | |")
                continue
            ru = a["res_usage"]
            rep = a.get("assembler_report") or {}
            spills = f"{rep.get('spill_stores', '-')}/{rep.get('spill_loads', '-')}" if rep else "-"
            lds = ", ".join(f"{k} x{v}" for k, v in a["local_loads_stores"].items()) or "none"
            ms = a["time_s"].get("median", 0) * 1e3
            lines.append(
                f"| {label} | {'yes' if a['sass_equal_to_first'] else '**no**'} | {a['sass_instructions']} | "
                f"{ru.get('REG', '-')} | {ru.get('STACK', '-')} | {ru.get('LOCAL', '-')} | {spills} | {lds} | {ms:.2f} |"
            )
        lines.append("")
        for label, a in r.get("assemblers", {}).items():
            if a.get("sass_diff_head"):
                lines += [f"SASS of {label} against the first row (head):", "", "```diff", *a["sass_diff_head"], "```", ""]
    if res.get("gpu"):
        lines += ["## On the GPU (same inputs, both assemblers)", ""]
        lines += [f"- {k}: {v}" for k, v in res["gpu"].items()]
        lines.append("")
    errs = res.get("errors") or {}
    if errs:
        lines += ["## Errors", "", *[f"- {k}:\n\n```\n{v[-1500:]}\n```" for k, v in errs.items()], ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--target", help="sm_XX (default: device 0's)")
    a = ap.parse_args()

    import tilec
    from tilec.backends.cuda import nvjitlink, toolchain

    settings = tilec.Settings.from_env({**os.environ, "TILEC_CACHE": "0"})
    arch = a.target or lib.sm_target()
    cuobjdump = toolchain.find_cuda_tool(settings, "cuobjdump")
    machine: dict[str, Any] = {"target": arch, "cuobjdump": str(cuobjdump) if cuobjdump else None}
    try:
        machine.update({k: v for k, v in lib.machine().items() if k in ("gpu", "nvidia_smi", "cpu", "torch", "triton")})
    except Exception as exc:  # no torch: compile-side comparisons still run
        machine["machine_error"] = repr(exc)
    try:
        machine["nvjitlink"] = nvjitlink.version()
    except tilec.ToolNotFoundError as exc:
        machine["nvjitlink"] = f"unavailable: {exc}"
    res: dict[str, Any] = {"bench": "assembler", "machine": machine, "errors": {}, "kernels": {}}
    errors: dict[str, str] = res["errors"]
    for kernel, build in modules().items():
        with lib.section(f"assemble {kernel}", errors):
            res["kernels"][kernel] = compare(kernel, build, arch, a.reps, settings, str(cuobjdump) if cuobjdump else None)
    with lib.section("launch both cubins on the GPU", errors):
        res["gpu"] = run_on_gpu(arch, settings)
    out = lib.out_dir(a.out)
    lib.write_json(out / "bench-assembler.json", res)
    (out / "bench-assembler.md").write_text(markdown(res) + "\n")
    print(f"wrote {out / 'bench-assembler.json'} and bench-assembler.md")
    for kernel, r in res["kernels"].items():
        for label, info in r["assemblers"].items():
            if "error" in info:
                print(f"{kernel:10s} {label}: error")
            else:
                ru = info["res_usage"]
                print(
                    f"{kernel:10s} {label}: SASS equal {info['sass_equal_to_first']}, {info['sass_instructions']} instr, "
                    f"REG {ru.get('REG')}, LOCAL {ru.get('LOCAL')}, {info['time_s']['median'] * 1e3:.2f} ms"
                )
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
