"""PTX -> cubin with ptxas, nvJitLink and nvPTXCompiler, on the same PTX: SASS, registers, spills, local memory.

    python3 -m bench.tilec_assembler [--out DIR] [--reps 7] [--target sm_90]

tilec's default assembler (`auto`) is nvPTXCompiler where it gives ptxas's code, and ptxas
otherwise; nvJitLink (`assembler="nvjitlink"`) gives `ptxas -c`'s code. For each bench kernel (tilec_kernels.py: vector adds, the exp/sin loop,
row sums) and the `sinf` case (libdevice's __nv_sinf alone, whose slow path uses local memory),
the kernel is lowered to PTX once, and that PTX is assembled by:

- ptxas, as tilec runs it (`-arch=sm_XX -O3 -v`);
- the same ptxas with `-c` (relocatable device code: how nvJitLink compiles PTX before it links);
- nvJitLink, as tilec runs it (`-arch=sm_XX -O3 -Xptxas=-v`), and with variants of its options,
  to find which one makes a difference;
- Triton's bundled ptxas where Triton is installed (another ptxas version, same flags);
- NVIDIA's static PTX compiler library (nvPTXCompiler: ptxas as a library, whole program), through
  bench/nvptxcompiler_probe.c, built here where the library is found: TILEC_BENCH_NVPTXCOMPILER (a
  directory with include/nvPTXCompiler.h and lib/ or lib64/libnvptxcompiler_static.a), the CUDA
  toolkit, or the nvidia-nvptxcompiler wheel. Timed inside the probe's process, as nvJitLink is
  inside this one. tilec links the same library itself (assembler="nvptxcompiler", its default's
  pick where found): the probe times the library alone.

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
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib

# nvJitLink option sets tried beside tilec's own (the first), to see what changes the code.
NVJITLINK_VARIANTS: dict[str, list[str]] = {
    "tilec (-O3 -Xptxas=-v)": [],  # nvjitlink.options(...) as tilec passes them
    "no -O": ["drop:-O3"],
    "-Xptxas=-O3": ["-Xptxas=-O3"],
    "-ftz=1": ["-ftz=1"],
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

    from bench import tilec_kernels as K

    T = tilec.ir
    return {
        "vadd": lambda: K.vadd_scalar(T),
        "vadd_v4": lambda: K.vadd_vec(T, 1),
        "vadd_v8": lambda: K.vadd_vec(T, 2),
        "vadd_v8_m4": lambda: K.vadd_vec(T, 2, True),
        "vadd_v8_flat": lambda: K.vadd_vec(T, 2, one_path=True),
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


PROBE_SOURCE = Path(__file__).resolve().parent / "nvptxcompiler_probe.c"
RELOCATABLE = "-c (relocatable, as nvJitLink compiles PTX)"


def nvptxcompiler_roots(settings: Any, ptxas_path: Path | None) -> list[tuple[Path, str]]:
    """(directory, where it came from) of each place that may hold the static PTX compiler."""
    roots: list[tuple[Path, str]] = []
    if os.environ.get("TILEC_BENCH_NVPTXCOMPILER"):
        roots.append((Path(os.environ["TILEC_BENCH_NVPTXCOMPILER"]), "TILEC_BENCH_NVPTXCOMPILER"))
    for home in (settings.cuda_home, ptxas_path.parent.parent if ptxas_path else None, Path("/usr/local/cuda")):
        if home is not None:
            roots.append((Path(home), "the CUDA toolkit"))
    spec = importlib.util.find_spec("nvidia")
    for base in spec.submodule_search_locations or () if spec else ():
        for sub in ("cu13", "cu12"):
            roots.append((Path(base) / sub, "the nvidia-nvptxcompiler wheel"))
    return roots


def build_probe(settings: Any, ptxas_path: Path | None, work: Path) -> tuple[Path | None, str]:
    """(the probe program, where its library came from and its version) or (None, why there is none)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler (cc) to build bench/nvptxcompiler_probe.c"
    for root, origin in nvptxcompiler_roots(settings, ptxas_path):
        header = root / "include" / "nvPTXCompiler.h"
        libs = [root / d / "libnvptxcompiler_static.a" for d in ("lib64", "lib")]
        lib_a = next((p for p in libs if p.is_file()), None)
        if not header.is_file() or lib_a is None:
            continue
        exe = work / "nvptxcompiler_probe"
        cmd = [cc, "-O2", "-o", str(exe), str(PROBE_SOURCE), f"-I{header.parent}", str(lib_a), "-lpthread", "-lm", "-ldl", "-lrt"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        if proc.returncode != 0:
            return None, f"building the probe against {lib_a} failed: {proc.stderr[-800:]}"
        version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
        return exe, f"{lib_a} ({origin}), version {version}"
    return None, "no libnvptxcompiler_static.a found (set TILEC_BENCH_NVPTXCOMPILER, or install nvidia-nvptxcompiler)"


def probe_compile(exe: Path, ptx: str, arch: str, reps: int) -> tuple[bytes, str, list[float]]:
    """(cubin, info log, in-process times in s) from the probe."""
    with tempfile.TemporaryDirectory(prefix="tilec-probe-") as tmp:
        src, out = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        cmd = [str(exe), str(src), str(out), str(reps), f"-arch={arch}", "-O3", "-v"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"nvPTXCompiler failed ({proc.returncode}): {proc.stderr[-1500:]}")
        fields = proc.stdout.split()
        return out.read_bytes(), proc.stderr, [float(t) / 1e3 for t in fields[3:]]


def median_time(fn: Callable[[int], Any], reps: int) -> dict[str, Any]:
    samples = []
    for r in range(reps):
        t0 = time.perf_counter()
        fn(r)
        samples.append(time.perf_counter() - t0)
    return lib.stats(samples)


def compare(
    kernel: str,
    build: Callable[[], Any],
    arch: str,
    reps: int,
    settings: Any,
    cuobjdump: str | None,
    probe: tuple[Path, str] | None = None,
) -> dict[str, Any]:
    import tilec
    from tilec.backends.cuda import CudaBackend, nvjitlink, ptxas

    k = tilec.compile(build(), target=arch, settings=settings, use_ptxas=False)
    ptx = k.asm["ptx"]
    name = k.name
    out: dict[str, Any] = {"entry": name, "ptx_lines": ptx.count("\n"), "assemblers": {}}
    found = CudaBackend.ptxas(settings)
    candidates: dict[str, Callable[[str], tuple[bytes, str]]] = {}
    relocatable = None
    if found is not None:
        candidates[f"ptxas {found.version} (tilec's default)"] = lambda p: ptxas.assemble(found.path, p, arch, (), 3)
        relocatable = f"ptxas {found.version} {RELOCATABLE}"
        candidates[relocatable] = lambda p: ptxas.assemble(found.path, p, arch, ("-c",), 3)
    own_times: dict[str, Callable[[str], list[float]]] = {}
    if probe is not None:
        exe, version = probe
        label = f"nvPTXCompiler {version} (static library, in process)"
        candidates[label] = lambda p: probe_compile(exe, p, arch, 0)[:2]
        own_times[label] = lambda p: probe_compile(exe, p, arch, reps)[2]
    try:  # tilec's own link of the library (absent from older tilecs)
        from tilec.backends.cuda import backend as cuda_backend
        from tilec.backends.cuda import nvptxcompiler, toolchain

        nvc = cuda_backend.nvptxcompiler_library(settings)
        shim = nvptxcompiler.load(nvc, settings, toolchain.memo_dir(settings))
        label = f"nvPTXCompiler {nvc.version} (tilec's assembler=nvptxcompiler)"
        candidates[label] = lambda p: nvptxcompiler.assemble(shim, nvc, p, arch, (), 3)
    except Exception as exc:
        out["tilec_nvptxcompiler_error"] = repr(exc)
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
    relocatable_sass: list[str] | None = None
    for label, assemble in candidates.items():
        try:
            cubin, log = assemble(ptx)
            info = describe(cuobjdump, cubin, log, name)
            if label in own_times:
                info["time_s"] = lib.stats(own_times[label](ptx))
            else:
                # A comment makes each PTX unique, so that nothing inside the assembler can reuse work.
                info["time_s"] = median_time(lambda r, a=assemble: a(ptx + f"\n// rep {r}\n"), reps)
        except Exception as exc:
            out["assemblers"][label] = {"error": repr(exc)[-2000:]}
            continue
        instrs = info.pop("_sass")
        if label == relocatable:
            relocatable_sass = instrs
        elif relocatable_sass is not None and cuobjdump is not None:
            info["sass_equal_to_relocatable"] = instrs == relocatable_sass
        if reference is None:
            reference = instrs
            info["sass_equal_to_first"] = True
        else:
            info["sass_equal_to_first"] = instrs == reference
            if instrs != reference and label != relocatable:
                diff = list(difflib.unified_diff(reference, instrs, "first", label, lineterm="", n=1))
                info["sass_diff_head"] = diff[:80]
        out["assemblers"][label] = info
    return out


def run_on_gpu(arch: str, settings: Any) -> dict[str, Any]:
    """Launch the kernels tilec_compile knows, built with each assembler, on the same inputs."""
    import tilec
    import torch

    from bench import tilec_compile as C

    out: dict[str, Any] = {}
    for kernel in C.TILEC_KERNELS:
        t = C.inputs(kernel)
        results = {}
        for assembler in ("ptxas", "nvjitlink", "nvptxcompiler"):
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
            "rel_err_nvptxcompiler": results["nvptxcompiler"],
            "nvptxcompiler_outputs_bit_equal": bool(torch.equal(results["ptxas_output"], results["nvptxcompiler_output"])),
        }
    return out


def summary(res: dict[str, Any]) -> list[str]:
    """One row per kernel: which assemblers give the default's SASS, and which give `ptxas -c`'s."""
    kernels = res.get("kernels", {})
    labels: list[str] = []
    for r in kernels.values():
        labels += [lb for lb in r.get("assemblers", {}) if lb not in labels and RELOCATABLE not in lb]
    labels = labels[1:]  # the first is the reference
    if not kernels or not labels:
        return []
    lines = [
        "## Summary: SASS against tilec's default (ptxas, whole program) and against `ptxas -c`",
        "",
        "Each cell: same SASS as the default / as `ptxas -c`, then the median ms.",
        "",
        "| kernel | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for kernel, r in kernels.items():
        cells = []
        for lb in labels:
            a = r.get("assemblers", {}).get(lb)
            if a is None or "error" in a:
                cells.append("-" if a is None else "error")
                continue
            rel = a.get("sass_equal_to_relocatable")
            cells.append(
                f"{'yes' if a['sass_equal_to_first'] else 'no'} / {'-' if rel is None else 'yes' if rel else 'no'}"
                f", {a['time_s'].get('median', 0) * 1e3:.2f} ms"
            )
        lines.append(f"| `{kernel}` | " + " | ".join(cells) + " |")
    return [*lines, ""]


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# PTX -> cubin: ptxas against nvJitLink and nvPTXCompiler",
        "",
        "Produced by `bench/tilec_assembler.py`. Raw numbers: [bench-assembler.json](bench-assembler.json).",
        "",
        *[f"- {k}: {str(v).strip()}" for k, v in res["machine"].items() if not isinstance(v, dict)],
        *[f"- nvJitLink library, {k}: {v}" for k, v in res["machine"].get("nvjitlink_library", {}).items()],
        "",
        *summary(res),
    ]
    for kernel, r in res.get("kernels", {}).items():
        lines += [f"## `{kernel}` (entry `{r.get('entry')}`, {r.get('ptx_lines')} PTX lines)", ""]
        if r.get("nvjitlink_error"):
            lines += [f"nvJitLink unavailable: {r['nvjitlink_error'].strip()}", ""]
        lines += [
            "| assembler | SASS = first row | SASS = `ptxas -c` | instructions | REG | STACK | LOCAL | spill st/ld (own report) | LDL/STL | ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, a in r.get("assemblers", {}).items():
            if "error" in a:
                lines.append(f"| {label} | error: {a['error'][:200]} | | | | | | | | |")
                continue
            rel = a.get("sass_equal_to_relocatable")
            rel_text = "-" if rel is None else ("yes" if rel else "no")
            ru = a["res_usage"]
            rep = a.get("assembler_report") or {}
            spills = f"{rep.get('spill_stores', '-')}/{rep.get('spill_loads', '-')}" if rep else "-"
            lds = ", ".join(f"{k} x{v}" for k, v in a["local_loads_stores"].items()) or "none"
            ms = a["time_s"].get("median", 0) * 1e3
            lines.append(
                f"| {label} | {'yes' if a['sass_equal_to_first'] else '**no**'} | {rel_text} | {a['sass_instructions']} | "
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
        machine["nvjitlink_library"] = lib.loaded_nvjitlink()
    except tilec.ToolNotFoundError as exc:
        machine["nvjitlink"] = f"unavailable: {exc}"
    from tilec.backends.cuda import CudaBackend

    found = CudaBackend.ptxas(settings)
    work = Path(tempfile.mkdtemp(prefix="tilec-assembler-"))
    exe, origin = build_probe(settings, found.path if found else None, work)
    machine["nvptxcompiler"] = origin
    probe = (exe, origin.rsplit("version ", 1)[1]) if exe is not None else None
    res: dict[str, Any] = {"bench": "assembler", "machine": machine, "errors": {}, "kernels": {}}
    errors: dict[str, str] = res["errors"]
    for kernel, build in modules().items():
        with lib.section(f"assemble {kernel}", errors):
            res["kernels"][kernel] = compare(
                kernel, build, arch, a.reps, settings, str(cuobjdump) if cuobjdump else None, probe
            )
    shutil.rmtree(work, ignore_errors=True)
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
