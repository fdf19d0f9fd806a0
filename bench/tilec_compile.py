"""Compile latency, tilec against Triton, on the same kernels in one run.

    python3 -m bench.tilec_compile [--out DIR] [--reps 7] [--fresh 3] [--pairs 40]

Cold: IR -> cubin with no cache hit. tilec: the llvmlite module is built and compiled
(tilec.compile) into an empty cache directory, and again with the cache off. Triton: the
process is warmed by compiling another kernel first, then the kernel's first
specialization is compiled through the JIT (`warmup`), then `triton.compile` is repeated
on that same specialization with `always_compile`: a second specialization in a warm
process, with Triton's import and initialisation out of the number. Then both again in pairs (--pairs per
kernel, bench/tilec_cold_pairs.py): one cold compile of each back to back, the order swapping, so
both sides meet the same machine speed; the cold goal's verdict is the median of the pairs' ratios.

Warm: a cache hit in a fresh process. Children start with imports done and a CUDA
context made (neither is timed), then time the compile call that hits the on-disk cache,
and the first launch up to its synchronize. Kernels: a vector add, and a kernel with a
runtime loop calling libdevice (expf, sinf). Each is measured twice: keyed by the IR (the
llvmlite module is printed and hashed) and through a `source_key=` shortcut (no IR printed).
The `tilec-parts` children time each step of the hit path (Compiler.store.get) on its own.

    python3 -m bench.tilec_compile --only hit [--target sm_90] [--fresh 11] [--baseline PYTHON] [--baseline-site DIR]

measures only tilec's warm hits and their parts, with no GPU, torch or Triton (the cache is
seeded by compiling first; a machine with ptxas and libdevice is enough). Its hit children pass
`settings=` made before the clock, except `tilec-hit-env-shortcut`, which names the cache in
TILEC_CACHE_DIR and passes none, so its call also reads the environment. `--baseline` names
another interpreter whose tilec (e.g. a venv with main's wheel) is measured in the same run:
its fresh processes take turns with this one's, each with its own cache; `--baseline-site`
names a directory the other tilec is installed in instead (bench/tilec_gpu.sh:
TILEC_BENCH_BASELINE). Both work in the full run too (its tilec children).

The floor: children that start like a hit child (tilec imported, the module built) and then
do, in straight-line code, only what any hit through a shortcut that keeps its checks must do:
open and read the shortcut file (the same file a hit reads), check the BLAKE2b digest of the
bytes a launch needs (the shortcut's lines, the entry's JSON line and the cubin: what tilec checks
on a hit; the earlier stages are checked when first asked for), stat every watched path, split
the shortcut's head line (the kernel's name and parameters), all in Python (hashlib). Before
tilec's shortcuts had a head, the floor parsed the entry's JSON line instead (reports before
2026-11-27). Timed beside it in the same child: tilec making the kernel object from those bytes
(head -> kernel).

Writes bench-compile.json; prints a table of ratios last.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import tilec_benchlib as lib

ROOT = Path(__file__).resolve().parents[1]  # children run as `-m bench.NAME` from the checkout

# Triton BLOCK per kernel (tilec launches 256-thread blocks, one element per thread).
TRITON_BLOCK = {"vadd": 1024, "expsin": 256}
# vadd_v8_m4: vadd_v8 for an n that is a multiple of 4, its last block by whole vectors; vadd_v8_flat: the same
# in one path, as Triton's vadd lowers (context rows, not goal rows)
TILEC_KERNELS = ("vadd", "vadd_v8", "vadd_v8_m4", "vadd_v8_flat", "expsin")
# each tilec kernel's Triton twin: the 8-wide adds against Triton's vadd at BLOCK 1024, eight elements a thread
TRITON_TWIN = {"vadd": "vadd", "vadd_v8": "vadd", "vadd_v8_m4": "vadd", "vadd_v8_flat": "vadd", "expsin": "expsin"}
GOAL_KERNELS = ("vadd", "vadd_v8", "expsin")
TRITON_KERNELS = ("vadd", "expsin")
N = 1 << 20
ITERS = 8
SCALE = 0.9


def target() -> str:
    """The sm_XX to compile for: TILEC_BENCH_TARGET (set by --target), else device 0's."""
    return os.environ.get("TILEC_BENCH_TARGET") or lib.sm_target()


def source_key(kernel: str) -> str:
    return f"bench-{kernel}"


def tilec_module(name: str) -> Any:
    import tilec

    from bench import tilec_kernels as K

    if name == "vadd":
        return K.vadd_scalar(tilec.ir)
    if name == "vadd_v8":
        return K.vadd_vec(tilec.ir, 2)
    if name == "vadd_v8_m4":
        return K.vadd_vec(tilec.ir, 2, whole_vectors=True)
    if name == "vadd_v8_flat":
        return K.vadd_vec(tilec.ir, 2, one_path=True)
    if name == "expsin":
        return K.exp_sin_loop(tilec.ir)
    if name == "warmup":
        return K.vadd_vec(tilec.ir, 1)
    raise ValueError(name)


def tilec_settings(cache_dir: Path | None, ptxas: str | None = None) -> Any:
    import tilec

    env = dict(os.environ)
    if cache_dir is None:
        env["TILEC_CACHE"] = "0"
    else:
        env["TILEC_CACHE"] = "1"
        env["TILEC_CACHE_DIR"] = str(cache_dir)
    if ptxas:
        env["TILEC_PTXAS"] = ptxas
    return tilec.Settings.from_env(env)


def inputs(kernel: str) -> dict[str, Any]:
    import torch

    x = torch.randn(N, device="cuda")
    if kernel.startswith("vadd"):
        return {"a": x, "b": torch.randn(N, device="cuda"), "out": torch.full_like(x, float("nan"))}
    return {"x": x, "y": torch.full_like(x, float("nan"))}


def tilec_launch(k: Any, kernel: str, t: dict[str, Any]) -> None:
    if kernel == "vadd":
        k[(N + 255) // 256, 256](t["a"], t["b"], t["out"], N)
    elif kernel.startswith("vadd_v8"):
        k[(N + 2047) // 2048, 256](t["a"], t["b"], t["out"], N)
    else:
        k[(N + 255) // 256, 256](t["x"], t["y"], SCALE, ITERS, N)


def triton_fn(kernel: str) -> Any:
    from bench import tilec_triton

    return {"vadd": tilec_triton.vadd, "expsin": tilec_triton.expsin}[kernel]


def triton_args(kernel: str, t: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[int]]:
    block = TRITON_BLOCK[kernel]
    grid = ((N + block - 1) // block,)
    if kernel == "vadd":
        return (t["a"], t["b"], t["out"], N), grid
    return (t["x"], t["y"], SCALE, ITERS, N), grid


def check(kernel: str, t: dict[str, Any]) -> float:
    """Relative error against a float64 torch reference; raises when off or unwritten."""
    import torch

    torch.cuda.synchronize()
    if kernel.startswith("vadd"):
        got, ref = t["out"], t["a"] + t["b"]
        if not torch.equal(got, ref):
            raise AssertionError(f"{kernel}: result differs from torch (a + b)")
        return 0.0
    v = t["x"].double()
    acc = torch.zeros_like(v)
    for _ in range(ITERS):
        acc += torch.exp(v)
        v = torch.sin(v) * SCALE
    got = t["y"]
    if torch.isnan(got).any():
        raise AssertionError(f"{kernel}: unwritten (NaN) outputs")
    err = float(torch.linalg.vector_norm(got.double() - acc) / torch.linalg.vector_norm(acc))
    if not err < 1e-5:
        raise AssertionError(f"{kernel}: relative error {err:.3g} vs float64 torch")
    return err


# --------------------------------------------------------------------------- tilec, in process
@contextlib.contextmanager
def stage_clock() -> Iterator[dict[str, float]]:
    """Each stage's time inside the tilec.compile calls made meanwhile (the stages timed on
    their own, in tilec_stages, run outside a compile)."""
    from tilec import compiler as tc

    took: dict[str, float] = {}
    plain = tc.Compiler._stages

    def timed(self: Any, backend: Any, target: Any, opts: Any) -> dict[str, Any]:
        def clock(name: str, stage: Any) -> Any:
            def run(src: Any, ctx: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return stage(src, ctx)
                finally:
                    took[name] = took.get(name, 0.0) + time.perf_counter() - t0

            return run

        return {name: clock(name, stage) for name, stage in plain(self, backend, target, opts).items()}

    tc.Compiler._stages = timed  # type: ignore[method-assign]
    try:
        yield took
    finally:
        tc.Compiler._stages = plain  # type: ignore[method-assign]


def tilec_cold(reps: int, work: Path, info: dict[str, Any]) -> dict[str, Any]:
    import tilec

    target = lib.sm_target()
    out: dict[str, Any] = {"target": target}
    # Warm the process: the native core loads, ptxas --version runs once, cuda-bindings'
    # nvJitLink module is imported (tens of milliseconds, once per process), and nvPTXCompiler's
    # shim is linked (once per library file and cache; here the cache is off: once per process).
    tilec.compile(tilec_module("warmup"), target=target, settings=tilec_settings(None))
    with contextlib.suppress(Exception):
        from tilec.backends.cuda import nvjitlink

        nvjitlink.version()
    nvptxc_error = None
    try:
        tilec.compile(tilec_module("warmup"), target=target, settings=tilec_settings(None), assembler="nvptxcompiler")
    except Exception as exc:
        nvptxc_error = repr(exc)
    triton_ptxas = info.get("triton_ptxas")
    for name in TILEC_KERNELS:
        fresh, nocache, other_ptxas, build, nvj = [], [], [], [], []
        by: dict[str, list[float]] = {"ptxas": [], "nvptxcompiler": []}
        within: dict[str, list[float]] = {}
        k = None
        nvj_error = None
        for r in range(reps):
            t0 = time.perf_counter()
            m = tilec_module(name)
            t1 = time.perf_counter()
            k = tilec.compile(m, target=target, settings=tilec_settings(work / f"cold-{name}-{r}"))
            t2 = time.perf_counter()
            assert k.cache_status == "miss", k.cache_status
            build.append(t1 - t0)
            fresh.append(t2 - t0)
            with stage_clock() as inside:
                t0 = time.perf_counter()
                k2 = tilec.compile(tilec_module(name), target=target, settings=tilec_settings(None))
                nocache.append(time.perf_counter() - t0)
            assert k2.cache_status == "disabled"
            for stage, took in inside.items():
                within.setdefault(stage, []).append(took)
            within.setdefault("outside the stages", []).append(nocache[-1] - sum(inside.values()))
            own = ptxas_own_time(k2)
            if own is not None:
                # What ptxas itself reports as its compile: the rest of its process's time is
                # starting and ending the process, which only an in-process assembler avoids.
                within.setdefault("cubin: ptxas's own compile time (its -v log)", []).append(own)
            if triton_ptxas:
                t0 = time.perf_counter()
                tilec.compile(
                    tilec_module(name),
                    target=target,
                    settings=tilec_settings(None, ptxas=triton_ptxas),
                )
                other_ptxas.append(time.perf_counter() - t0)
            if nvj_error is None:
                try:
                    t0 = time.perf_counter()
                    tilec.compile(
                        unique_ir(tilec_module(name), r),
                        target=target,
                        settings=tilec_settings(None),
                        assembler="nvjitlink",
                    )
                    nvj.append(time.perf_counter() - t0)
                except Exception as exc:
                    nvj_error = repr(exc)
            # Each assembler by name, the whole IR -> cubin in this warm process, cache off.
            for assembler in by if nvptxc_error is None else ("ptxas",):
                t0 = time.perf_counter()
                tilec.compile(tilec_module(name), target=target, settings=tilec_settings(None), assembler=assembler)
                by[assembler].append(time.perf_counter() - t0)
        assert k is not None
        out[name] = {
            "cold_s": lib.stats(fresh),
            "cold_nocache_s": lib.stats(nocache),
            "cold_nocache_within_s": {k: lib.stats(v) for k, v in within.items()},
            "cold_with_triton_ptxas_s": lib.stats(other_ptxas),
            "cold_cubin_via_nvjitlink_s": lib.stats(nvj),
            "nvjitlink_error": nvj_error,
            "cold_cubin_via_ptxas_s": lib.stats(by["ptxas"]),
            "cold_cubin_via_nvptxcompiler_s": lib.stats(by["nvptxcompiler"]),
            "nvptxcompiler_error": nvptxc_error,
            # getattr: an older tilec (TILEC_BENCH_PROTO, a baseline) has no note
            "default_assembler": [k.metadata.assembler, getattr(k.metadata, "assembler_note", "")],
            "profile_one_cold_compile": profile_compile(name, target),
            "build_ir_s": lib.stats(build),
            "stages_s": tilec_stages(name, target, reps),
            "ptx_ops": lib.ptx_ops(k.asm["ptx"]),
            "registers": k.metadata.registers,
            "libdevice_linked": list(k.metadata.libdevice_linked),
            "ptxas_version": k.metadata.ptxas_version,
            "nvptxcompiler_version": getattr(k.metadata, "nvptxcompiler_version", None),
        }
    return out


def unique_ir(module: Any, rep: int) -> str:
    """The module's IR text with a module-level asm comment, which LLVM copies into the PTX: each
    rep's PTX differs, so that no cache inside nvJitLink can answer (a runner's nvJitLink took
    less time for a whole compile of the same PTX again than for its own stage on fresh PTX)."""
    from tilec import compiler as tc

    return tc._as_ir(module) + f'\nmodule asm "// rep {rep}"\n'


def ptxas_own_time(kernel: Any) -> float | None:
    """Seconds ptxas reports for its compile ("Compile time = X ms" in its -v log), or None
    when the kernel's cubin came from elsewhere."""
    found = re.search(r"Compile time = ([0-9.]+) ms", getattr(kernel.metadata, "ptxas_log", None) or "")
    return float(found.group(1)) / 1e3 if found else None


def tilec_stages(name: str, target: str, reps: int) -> dict[str, Any]:
    """Each named stage timed on its own (same calls tilec.compile makes)."""
    import tilec
    from tilec import compiler as tc
    from tilec import native
    from tilec.backends.cuda import toolchain

    errors_note: list[str] = []
    c = tilec.Compiler(tilec_settings(None))
    opts = tilec.CompileOptions(target=target)
    times: dict[str, list[float]] = {}
    for _ in range(reps):
        md = tilec.Metadata(name="", target=target, signature=(), llvm_version=tilec.llvm_version())
        t0 = time.perf_counter()
        cur: Any = tc._as_ir(tilec_module(name))
        times.setdefault("ir_text", []).append(time.perf_counter() - t0)
        for stage, fn in c.stages(opts).items():
            t0 = time.perf_counter()
            cur = fn(cur, md)
            times.setdefault(stage, []).append(time.perf_counter() - t0)
        # llir_opt split into its two native calls: libdevice link (when needed) and the pipeline.
        with native.NativeModule(c.make_llir(tc._as_ir(tilec_module(name)), md, opts)) as mod:
            t0 = time.perf_counter()
            if any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions()):
                mod.link_internalized(str(toolchain.find_libdevice(c.settings)))
            t1 = time.perf_counter()
            mod.set_module_flag("nvvm-reflect-ftz", 0)
            mod.optimize(target, "", opts.opt_level)
            t2 = time.perf_counter()
        times.setdefault("llir_opt.libdevice_link", []).append(t1 - t0)
        times.setdefault("llir_opt.optimize", []).append(t2 - t1)
        # The same PTX to cubin in-process through nvJitLink (no ptxas process); a comment
        # makes each PTX unique so no cache inside nvJitLink can answer.
        try:
            ptx = cur_ptx(c, name, opts, md) + f"\n// rep {len(times['ir_text'])}\n"
            t0 = time.perf_counter()
            from tilec.backends.cuda import nvjitlink  # absent from older wheels

            nvjitlink.assemble(ptx, target)
            times.setdefault("cubin_via_nvjitlink", []).append(time.perf_counter() - t0)
        except Exception as exc:
            errors_note.append(repr(exc))
        ptx = cur_ptx(c, name, opts, md)
        for assembler in ("ptxas", "nvptxcompiler"):
            by_name = tilec.CompileOptions(target=target, backend_options={"assembler": assembler})
            with contextlib.suppress(Exception):  # nvptxcompiler: absent from older wheels
                t0 = time.perf_counter()
                c.make_cubin(ptx, md, by_name)
                times.setdefault(f"cubin_via_{assembler}", []).append(time.perf_counter() - t0)
    out = {k: lib.stats(v)["median"] for k, v in times.items()}
    if errors_note:
        out["nvjitlink_error"] = errors_note[-1]  # type: ignore[assignment]
    return out


def cur_ptx(c: Any, name: str, opts: Any, md: Any) -> str:
    from tilec import compiler as tc

    llir = c.make_llir(tc._as_ir(tilec_module(name)), md, opts)
    return str(c.make_ptx(c.make_llir_opt(llir, md, opts), md, opts))


def profile_compile(name: str, target: str) -> str:
    """cProfile of one cold tilec.compile (cache off): where the time outside the stages goes."""
    import cProfile
    import io
    import pstats

    import tilec

    prof = cProfile.Profile()
    m = tilec_module(name)
    prof.enable()
    tilec.compile(m, target=target, settings=tilec_settings(None))
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
    return buf.getvalue()[-6000:]


# --------------------------------------------------------------------------- Triton, in process
def triton_specialization(name: str) -> tuple[Any, Any, Any, float]:
    """The kernel's first specialization compiled through Triton's JIT (`warmup`), and what the JIT
    passed to triton.compile (source, target, options), to repeat that compile; the JIT's seconds."""
    import torch

    fn = triton_fn(name)
    args, grid = triton_args(name, inputs(name))
    fn.device_caches[torch.cuda.current_device()]  # the binder exists; fn.compile is now triton.compile
    captured: list[tuple[Any, Any, Any]] = []
    real = fn.compile

    def spy(src: Any, target: Any = None, options: Any = None, **kw: Any) -> Any:
        captured.append((src, target, options))
        return real(src, target=target, options=options, **kw)

    fn.compile = spy
    try:
        t0 = time.perf_counter()
        fn.warmup(*args, BLOCK=TRITON_BLOCK[name], grid=grid)
        jit_first = time.perf_counter() - t0
    finally:
        fn.compile = real
    assert captured, "expected a compile"
    return (*captured[-1], jit_first)


def triton_cold(reps: int, specs: dict[str, tuple[Any, Any, Any]] | None = None) -> dict[str, Any]:
    """Triton's cold compiles; each kernel's (src, target, options) also go into `specs` (for the pairs)."""
    import torch
    import triton
    from triton import knobs

    from bench import tilec_triton

    out: dict[str, Any] = {}
    # Warm the process: first JIT compile of an unrelated kernel pays Triton's initialisation.
    t = torch.randn(4096, device="cuda")
    t0 = time.perf_counter()
    tilec_triton.vadd_warmup_only.warmup(t, t, 4096, BLOCK=256, grid=(1,))
    out["process_warmup_s"] = time.perf_counter() - t0

    events: list[dict[str, Any]] = []

    def listener(*, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool) -> None:
        events.append(
            {
                "cache_hit": cache_hit,
                "ir_initialization_s": times.ir_initialization / 1e6,
                "stages_s": {k: v / 1e6 for k, v in times.lowering_stages},
                "store_results_s": times.store_results / 1e6,
            }
        )

    knobs.compilation.listener = listener
    try:
        for name in TRITON_KERNELS:
            events.clear()
            src, target, options, jit_first = triton_specialization(name)
            if specs is not None:
                specs[name] = (src, target, options)
            assert events and not events[-1]["cache_hit"], "expected a compile"
            cold: list[float] = []
            stage_events: list[dict[str, Any]] = []
            knobs.compilation.always_compile = True
            try:
                for _ in range(reps):
                    events.clear()
                    t0 = time.perf_counter()
                    kern = triton.compile(src, target=target, options=options)
                    cold.append(time.perf_counter() - t0)
                    stage_events.extend(events)
            finally:
                knobs.compilation.always_compile = False
            stage_names = list(stage_events[0]["stages_s"]) if stage_events else []
            out[name] = {
                "block": TRITON_BLOCK[name],
                "jit_first_specialization_s": jit_first,
                "cold_s": lib.stats(cold),
                "stages_s": {
                    "make_ir": lib.stats([e["ir_initialization_s"] for e in stage_events])["median"],
                    **{s: lib.stats([e["stages_s"][s] for e in stage_events])["median"] for s in stage_names},
                    "store_results": lib.stats([e["store_results_s"] for e in stage_events])["median"],
                },
                "ptx_ops": lib.ptx_ops(kern.asm["ptx"]),
                "num_warps": kern.metadata.num_warps,
                "target": str(target),
                "attrs": {str(k): v for k, v in getattr(src, "attrs", {}).items()},
            }
    finally:
        knobs.compilation.listener = None
    return out


def correctness_and_seed(work: Path) -> dict[str, Any]:
    """Run every kernel once through both (fills the warm caches; Triton's launcher too)."""
    import tilec

    target = lib.sm_target()
    out: dict[str, Any] = {}
    for name in TILEC_KERNELS:
        t = inputs(name)
        k = tilec.compile(tilec_module(name), target=target, settings=tilec_settings(work / "warm"))
        tilec_launch(k, name, t)
        out[f"tilec:{name}"] = check(name, t)
        try:  # the nvJitLink cubin computes the same thing (and is real SASS)
            k2 = tilec.compile(tilec_module(name), target=target, settings=tilec_settings(None), assembler="nvjitlink")
            t = inputs(name)
            tilec_launch(k2, name, t)
            out[f"tilec-nvjitlink:{name}"] = check(name, t)
            out[f"cubin_bytes:{name}"] = {"ptxas": len(k.asm["cubin"]), "nvjitlink": len(k2.asm["cubin"])}
            out[f"sass:{name}"] = {"ptxas": lib.sass_ops(k.asm["cubin"]), "nvjitlink": lib.sass_ops(k2.asm["cubin"])}
        except Exception as exc:
            out[f"tilec-nvjitlink:{name}"] = repr(exc)
    for name in TRITON_KERNELS:
        t = inputs(name)
        args, grid = triton_args(name, t)
        triton_fn(name)[grid](*args, BLOCK=TRITON_BLOCK[name])
        out[f"triton:{name}"] = check(name, t)
    return out


# --------------------------------------------------------------------------- fresh-process children
def child(kind: str, kernel: str, cache: Path, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    if kind == "seed":
        return seed_hits(cache)
    if kind == "floor":
        assert spec is not None
        return tilec_floor(kernel, cache, spec)
    if kind.startswith("tilec-parts"):
        return tilec_parts(kernel, cache, shortcut=kind == "tilec-parts-shortcut")
    if kind.startswith("tilec-hit"):
        return tilec_hit(kernel, cache, shortcut=kind.endswith("-shortcut"), from_env="-env" in kind)
    import torch

    torch.cuda.init()
    t = inputs(kernel)
    torch.cuda.synchronize()  # a CUDA context exists before anything is timed
    if kind == "floor-cuda":  # the floor, started like the GPU hit children below
        from tilec.backends.cuda import driver

        driver.current_context()
        assert spec is not None
        return tilec_floor(kernel, cache, spec)
    if kind in ("tilec", "tilec-shortcut"):
        import tilec
        from tilec.backends.cuda import driver

        driver.current_context()
        settings = tilec_settings(cache)
        key = source_key(kernel) if kind == "tilec-shortcut" else None
        arch = target()
        t0 = time.perf_counter()
        m = tilec_module(kernel)
        t1 = time.perf_counter()
        k = tilec.compile(m, target=arch, settings=settings, source_key=key)
        t2 = time.perf_counter()
        tilec_launch(k, kernel, t)
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        again = tilec.compile(m, target=arch, settings=settings, source_key=key)
        t4 = time.perf_counter()
        check(kernel, t)
        return {
            "cache_status": k.cache_status,
            "second_status": again.cache_status,
            "build_ir_s": t1 - t0,
            "compile_hit_s": t2 - t1,
            "first_launch_s": t3 - t2,
            "first_call_total_s": t3 - t1,
            "hit_in_process_s": t4 - t3,
        }
    if kind == "triton":
        from triton import knobs

        fn = triton_fn(kernel)
        args, grid = triton_args(kernel, t)
        hits: list[bool] = []
        knobs.compilation.listener = lambda **kw: hits.append(bool(kw["cache_hit"]))
        compile_times: list[float] = []
        t0 = time.perf_counter()
        dev = torch.cuda.current_device()
        fn.device_caches[dev]  # binder (and Triton's driver) as a first call makes them
        real = fn.compile

        def spy(*a: Any, **kw: Any) -> Any:
            s = time.perf_counter()
            r = real(*a, **kw)
            compile_times.append(time.perf_counter() - s)
            return r

        fn.compile = spy
        fn.warmup(*args, BLOCK=TRITON_BLOCK[kernel], grid=grid)
        t1 = time.perf_counter()
        fn[grid](*args, BLOCK=TRITON_BLOCK[kernel])
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        check(kernel, t)
        return {
            "cache_hits": hits,
            "compile_hit_s": compile_times[0] if compile_times else None,
            "jit_warmup_s": t1 - t0,
            "first_launch_s": t2 - t1,
            "first_call_total_s": t2 - t0,
            "hit_in_process_s": triton_hit_in_process(fn, kernel, t),
        }
    raise ValueError(kind)


def triton_hit_in_process(fn: Any, kernel: str, t: dict[str, Any]) -> float:
    """triton.compile of the same specialization again in this process (in-memory JIT cache bypassed)."""
    import triton

    src_target: list[tuple[Any, Any, Any]] = []
    real: Any = None

    def spy(src: Any, target: Any = None, options: Any = None, **kw: Any) -> Any:
        src_target.append((src, target, options))
        return real(src, target=target, options=options, **kw)

    import torch

    fn.device_caches.clear()
    fn.device_caches[torch.cuda.current_device()]  # a new binder sets fn.compile again
    real = fn.compile
    fn.compile = spy
    try:
        fn.warmup(*triton_args(kernel, t)[0], BLOCK=TRITON_BLOCK[kernel], grid=(1,))
    finally:
        fn.compile = real
    src, target, options = src_target[-1]
    t0 = time.perf_counter()
    triton.compile(src, target=target, options=options)
    return time.perf_counter() - t0


def tilec_hit(kernel: str, cache: Path, shortcut: bool, from_env: bool = False) -> dict[str, Any]:
    """One `tilec.compile` hitting the cache in this fresh process (imports and the llvmlite
    module before the clock), with no GPU: what a fresh process pays after import.
    `from_env`: no `settings=`, the cache named by TILEC_CACHE_DIR, so the call also makes its
    Settings from the environment, as a caller that passes none does."""
    import tilec

    settings = None
    if from_env:
        os.environ.update(TILEC_CACHE="1", TILEC_CACHE_DIR=str(cache))
    else:
        settings = tilec_settings(cache)
    m = tilec_module(kernel)
    key = source_key(kernel) if shortcut else None
    arch = target()
    t0 = time.perf_counter()
    k = tilec.compile(m, target=arch, settings=settings, source_key=key)
    t1 = time.perf_counter()
    again = tilec.compile(m, target=arch, settings=settings, source_key=key)
    t2 = time.perf_counter()
    return {
        "cache_status": k.cache_status,
        "second_status": again.cache_status,
        "compile_hit_s": t1 - t0,
        "hit_in_process_s": t2 - t1,
    }


def tilec_parts(kernel: str, cache: Path, shortcut: bool) -> dict[str, Any]:
    """The cache-hit path of tilec.compile (Compiler.store.get), step by step, first in a fresh
    process, then again. `shortcut`: through the source_key shortcut; else keyed by the IR."""
    import tilec
    from tilec.backends.cuda import toolchain
    from tilec.cache import format as tcache
    from tilec.cache import key as tkey
    from tilec.cache import store as tstore

    m = tilec_module(kernel)
    arch = target()
    rounds = []
    for _ in range(2):
        clock = [time.perf_counter()]
        names: list[str] = []

        def lap(name: str, _clock: list[float] = clock, _names: list[str] = names) -> None:
            _clock.append(time.perf_counter())
            _names.append(name)

        c = tilec.Compiler(tilec_settings(cache))
        lap("Settings.from_env (the bench's) + Compiler(settings)")
        opts = tilec.CompileOptions(target=arch)
        opts.validate()
        key = c.key(m, opts, source_key(kernel) if shortcut else None)
        lap("CompileOptions + validate + Key")
        assert key.quick() is not None
        lap("resolve_quick (built-in backend, no plugins, no native core)")
        if shortcut:
            sid = key.shortcut
            lap("shortcut id (repr of options and settings, BLAKE2b)")
            read = c.cache.read_shortcut(sid)
            assert read is not None and read[1], "no shortcut vouching for its tools: seed with source_key first"
            record = read[0]
            reader = "C" if tcache._hit is not None else "Python"
            lap(f"read the shortcut, check its digest up to the cubin, stat its tools ({reader})")
            rest = functools.partial(c.store._rest, sid, record)
            if c.store._head_kernel(key, sid, record, *key.backend_target(), rest) is not None:
                lap("head + the cubin's copy -> kernel (no JSON; metadata on first access)")
            else:
                entry = tcache.decode(record.key, record.entry, verify=False, checked=record.hot)
                lap("the entry's JSON line")
                assert entry is not None
                tstore.kernel_from(entry, key, record.key, "hit", rest)
                lap("payload -> kernel")
            parts = {n: b - a for n, a, b in zip(names, clock, clock[1:], strict=False)}
            parts["total"] = clock[-1] - clock[0]
            rounds.append(parts)
            continue
        toolchain.identity(c.settings)
        lap("tools identity (one remembered file, stat of watched paths)")
        base = key.base
        lap("rest of the key's parts (options digests, versions, the assembler auto picks)")
        ir = tkey.as_ir(m)
        lap("IR text (llvmlite module printed)")
        digest = tkey.digest(ir, base)
        lap("key digest (sha256 of the IR, JSON of the parts)")
        entry, status = c.cache.get(digest)
        lap("read the entry, check the digest of its bytes")
        assert entry is not None, status
        tstore.kernel_from(entry, key, digest, status)
        lap("payload -> kernel")
        parts = {n: b - a for n, a, b in zip(names, clock, clock[1:], strict=False)}  # clock has one more
        parts["total"] = clock[-1] - clock[0]
        rounds.append(parts)
    return {"first_in_process": rounds[0], "second_in_process": rounds[1]}


def seed_hits(cache: Path) -> dict[str, Any]:
    """Fill a warm cache without a GPU: every kernel keyed by its IR, and its shortcut."""
    import tilec

    for name in TILEC_KERNELS:
        for key in (None, source_key(name)):
            tilec.compile(tilec_module(name), target=target(), settings=tilec_settings(cache), source_key=key)
    return {"tilec": str(Path(tilec.__file__).parent)}


def floor_spec(kernel: str, cache: Path) -> dict[str, Any]:
    """The file a hit of `kernel` through its shortcut reads and the paths it stats, found with
    this process's tilec (the floor children get them as data, so that nothing of the hit path
    runs in them before the clock)."""
    import tilec
    from tilec import cache as tcache

    c = tilec.Compiler(tilec_settings(cache))
    opts = tilec.CompileOptions(target=target())
    shortcut = c.key(tilec_module(kernel), opts, source_key(kernel)).shortcut
    path = c.cache.shortcut_path(shortcut)
    record = tcache.decode_shortcut(path.read_bytes())
    assert record is not None and record.watch is not None, "no shortcut vouching for its tools"
    return {"file": str(path), "shortcut": shortcut, "watch": [os.fsdecode(p) for p, _, _ in record.watch]}


def tilec_floor(kernel: str, cache: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """The irreducible work of a hit through a shortcut, in this fresh process (see the module's
    docstring), then tilec making the kernel object from the bytes read."""
    import hashlib

    import tilec

    settings = tilec_settings(cache)
    tilec_module(kernel)  # the same process state as a hit child's
    path, watch = spec["file"], spec["watch"]
    clock = time.perf_counter
    t0 = clock()
    with open(path, "rb") as f:
        raw = f.read()
    t1 = clock()
    # header, key, base, "<hot> <length> <rest digest>", head, count, the watched paths, the entry
    lines = raw.split(b"\n", 6 + len(watch))
    hot = int(lines[3].split(b" ", 1)[0])
    head, start = len(lines[0]), len(raw) - len(lines[-1])
    checked = memoryview(raw)[head + 1 : start + hot]  # through the end of the cubin
    good = hashlib.blake2b(checked, digest_size=32).hexdigest().encode() == raw[head - 64 : head]
    t2 = clock()
    for p in watch:
        try:  # a watched path may be watched as absent (where a tool would appear)
            os.stat(p)
        except OSError:
            pass
    t3 = clock()
    first, order, text, name, types, names = lines[4].decode().split("\t")  # the head line
    order_t, text_t, signature = order.split(","), text.split(","), types.split(",")
    param_names = names.split(",") if names else []
    del text_t, param_names  # split as a hit splits its head; not used here
    t4 = clock()
    if not good or not name or first not in order_t or not signature:
        raise AssertionError("the shortcut's digest or head line is not what the floor expects")
    # tilec's part: the kernel object from those bytes (the call Store.get makes).
    from tilec import cache as tcache

    c = tilec.Compiler(settings)
    opts = tilec.CompileOptions(target=target())
    key = c.key(None, opts, source_key(kernel))  # type: ignore[arg-type]  # the IR is never asked for
    assert key.quick() is not None and key.shortcut == spec["shortcut"]
    record = tcache.decode_shortcut(raw)
    assert record is not None and record.head is not None
    rest = lambda: tcache.decode(record.key, record.entry, verify=False).parts  # noqa: E731 (never called here)
    t5 = clock()
    backend, tgt = key.backend_target()
    made = c.store._head_kernel(key, spec["shortcut"], record, backend, tgt, rest)
    t6 = clock()
    assert made is not None and made.name == name
    return {
        "floor_s": t4 - t0,
        "read_s": t1 - t0,
        "digest_s": t2 - t1,
        "stat_s": t3 - t2,
        "head_s": t4 - t3,
        "watched": len(watch),
        "bytes": len(raw),
        "kernel_object_s": t6 - t5,
    }


def run_child(
    kind: str,
    kernel: str,
    cache: Path,
    baseline: Baseline | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    python, env = baseline.command() if baseline is not None else (sys.executable, None)
    cmd = [python, "-m", "bench.tilec_compile", "--child", kind, "--kernel", kernel, "--cache", str(cache)]
    if spec is not None:
        cmd += ["--spec", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child {kind}/{kernel} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1][len("RESULT ") :]))


BASELINE = "baseline:"  # prefix of the kinds run by the baseline's tilec


@dataclass(frozen=True)
class Baseline:
    """Another tilec to measure beside this one: an interpreter (--baseline) and/or a directory
    it is installed in (--baseline-site, as `pip install --target` makes)."""

    python: str
    site: str | None

    def command(self) -> tuple[str, dict[str, str]]:
        """Its interpreter and environment: PYTHONPATH without the directory this process's
        tilec comes from (bench/tilec_gpu.sh puts it there), with the baseline's site first."""
        import tilec

        own = Path(tilec.__file__).resolve().parent.parent
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != own]
        if self.site:
            paths.insert(0, self.site)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        return self.python, env


def _turns(kinds: tuple[str, ...], rep: int) -> list[str]:
    """The order of one round: each tilec kind right beside the baseline's, the two swapping
    places every round, so that neither always follows the same process. With a fixed order,
    a baseline whose hit path was this one's read 1.2x slower (reports/tilec-bench-h100-dlpack)."""
    own = [k for k in kinds if not k.startswith(BASELINE)]
    order: list[str] = []
    for kind in own:
        pair = [kind] + ([BASELINE + kind] if BASELINE + kind in kinds else [])
        order += pair[::-1] if rep % 2 else pair
    return order


def warm(
    fresh: int,
    work: Path,
    kinds: tuple[str, ...] = ("tilec", "tilec-shortcut", "triton", "floor-cuda"),
    baseline: Baseline | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    own = seed_hits(work / "warm")  # the shortcut children need their shortcut written once
    if baseline is not None:
        kinds += tuple(BASELINE + k for k in kinds if k.startswith("tilec"))
        # Its own cache: the two tilecs need not share a format.
        seeded = run_child("seed", "-", work / "warm-baseline", baseline)
        if Path(seeded["tilec"]).resolve() == Path(own["tilec"]).resolve():
            raise RuntimeError(f"the baseline imports the same tilec as this process: {own['tilec']}")
        out["baseline"] = {"python": baseline.python, "site": baseline.site, **seeded}
    specs = {k: floor_spec(k, work / "warm") for k in TRITON_KERNELS}
    for rep in range(fresh):
        for kernel in TRITON_KERNELS:
            for kind in _turns(kinds, rep):
                if kind.startswith(BASELINE):
                    r = run_child(kind[len(BASELINE) :], kernel, work / "warm-baseline", baseline)
                else:
                    spec = specs[kernel] if kind.startswith("floor") else None
                    r = run_child(kind, kernel, work / "warm", spec=spec)
                out.setdefault(f"{kind}:{kernel}", []).append(r)
    for kernel in TRITON_KERNELS:
        for kind in ("tilec-parts", "tilec-parts-shortcut"):
            out[f"{kind}:{kernel}"] = run_child(kind, kernel, work / "warm")
    summary: dict[str, Any] = {}
    for key, runs in out.items():
        if key.startswith("tilec-parts") or key == "baseline":
            continue
        statuses = {r.get("cache_status") for r in runs}
        if "tilec" in key.split(":")[-2] and statuses != {"hit"}:
            raise AssertionError(f"{key}: expected cache hits, got {statuses}")
        fields = ("compile_hit_s", "first_launch_s", "first_call_total_s", "hit_in_process_s")
        if key.startswith("floor"):
            fields = ("floor_s", "read_s", "digest_s", "stat_s", "head_s", "kernel_object_s")
        summary[key] = {f: lib.stats([r[f] for r in runs if r.get(f) is not None]) for f in fields}
        if key.startswith("floor"):
            summary[key]["watched"] = runs[0]["watched"]
            summary[key]["bytes"] = runs[0]["bytes"]
    out["summary"] = summary
    return out


# --------------------------------------------------------------------------- report
def assembler_rows(kernel: str, cold: dict[str, Any], triton: float) -> list[list[Any]]:
    """Each assembler's whole cold IR -> cubin (cache off, warm process) beside Triton's, and the
    LLVM stages alone (what no assembler changes)."""
    rows: list[list[Any]] = []
    for name in ("ptxas", "nvptxcompiler", "nvjitlink"):
        a = cold.get(f"cold_cubin_via_{name}_s", {}).get("median")
        if a:
            code = " (ptxas -c's code)" if name == "nvjitlink" else ""
            label = f"cold IR->cubin {kernel}, assembler={name}{code} (ms)"
            rows.append([label, a * 1e3, triton * 1e3, a / triton, *goal(kernel, a / triton)])
    stages = cold.get("stages_s", {})
    llvm = [stages.get(s) for s in ("llir", "llir_opt", "ptx")]
    if all(llvm):
        total = sum(llvm)
        rows.append([f"floor: the LLVM stages alone (llir+llir_opt+ptx), {kernel} (ms)", total * 1e3, triton * 1e3, total / triton, "(context)", "-"])
    for name in ("ptxas", "nvptxcompiler"):
        alone = stages.get(f"cubin_via_{name}")
        if alone:
            rows.append([f"floor: PTX -> cubin alone, {name}, {kernel} (ms)", alone * 1e3, triton * 1e3, alone / triton, "(context)", "-"])
    return rows


def goal(kernel: str, ratio: float) -> list[str]:
    """The cold goal's columns for a kernel: judged on the goal's kernels, context on the others."""
    return ["<= 0.333", lib.verdict(ratio, 1 / 3)] if kernel in GOAL_KERNELS else ["(context)", "-"]


def ratios(res: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    cold_t, cold_tr = res.get("cold_tilec", {}), res.get("cold_triton", {})
    for tk, trk in TRITON_TWIN.items():
        if tk in cold_t and trk in cold_tr:
            a = cold_t[tk]["cold_s"]["median"]
            b = cold_tr[trk]["cold_s"]["median"]
            picked = (cold_t[tk].get("default_assembler") or ["?"])[0]
            label = f"cold IR->cubin {tk}, default (auto: {picked}) (ms)"
            paired = res.get("cold_pairs", {}).get("kernels", {}).get(tk)
            if paired:
                # The goal is judged on the pairs: these medians are each side's, taken seconds apart.
                rows.append([label, a * 1e3, b * 1e3, a / b, "(paired below)", "-"])
                r = statistics.median(paired["ratio"])
                rows.append([f"cold IR->cubin {tk} in pairs with Triton's {paired['triton_twin']}: the median of "
                             f"{len(paired['ratio'])} pairs' ratios (ms)", statistics.median(paired["tilec_s"]) * 1e3,
                             statistics.median(paired["triton_s"]) * 1e3, r, *goal(tk, r)])
                if paired.get("triton_ptx_in_process_s"):
                    # The same twin's own PTX through tilec's in-process assembler, third in each pair: the
                    # assembly alone of that kernel, under any compiler that assembles with this library.
                    f = statistics.median(paired["triton_ptx_in_process_ratio"])
                    rows.append([f"floor: Triton's own PTX of {paired['triton_twin']}, assembled in process, in the "
                                 f"same pairs (ms)", statistics.median(paired["triton_ptx_in_process_s"]) * 1e3,
                                 statistics.median(paired["triton_s"]) * 1e3, f, "(context)", "-"])
            else:
                rows.append([label, a * 1e3, b * 1e3, a / b, *goal(tk, a / b)])
            stage = cold_t[tk].get("stages_s", {}).get("cubin")
            if stage:
                # The default's floor: its PTX -> cubin stage alone (the assembler auto picks),
                # against the whole budget. Above 1/3, no change to the rest of tilec can meet the goal.
                rows.append(
                    [f"floor: the default's cubin stage alone, {tk} (ms)", stage * 1e3, b * 1e3, stage / b, "(context)", "-"]
                )
                # With the stages LLVM runs before it (the same IR's -O3 pipeline and NVPTX code
                # generation, which any LLVM-based compile of this IR does), each timed alone.
                parts = [cold_t[tk]["stages_s"].get(s) for s in ("llir", "llir_opt", "ptx", "cubin")]
                if all(parts):
                    total = sum(parts)
                    rows.append(
                        [f"floor: the stages alone, summed, {tk} (ms)", total * 1e3, b * 1e3, total / b, "(context)", "-"]
                    )
        if tk in cold_t and trk in cold_tr:
            rows += assembler_rows(tk, cold_t[tk], cold_tr[trk]["cold_s"]["median"])
    summ = res.get("warm", {}).get("summary", {})
    for k in TRITON_KERNELS:
        a = summ.get(f"tilec:{k}", {}).get("compile_hit_s", {}).get("median")
        b = summ.get(f"triton:{k}", {}).get("compile_hit_s", {}).get("median")
        if a is not None:
            rows.append(
                [
                    f"warm hit, fresh process {k} (ms)",
                    a * 1e3,
                    (b or 0) * 1e3,
                    a / b if b else "-",
                    "tilec <= 0.3 ms",
                    lib.verdict(a * 1e3, 0.3),
                ]
            )
        kinds = ("tilec-shortcut", "tilec-hit", "tilec-hit-shortcut", "tilec-hit-env-shortcut")
        for kind in (*kinds, *(BASELINE + kind for kind in ("tilec", *kinds))):
            a1 = summ.get(f"{kind}:{k}", {}).get("compile_hit_s", {}).get("median")
            if a1 is not None:
                rows.append(
                    [
                        f"warm hit, fresh process {k}, {kind} (ms)",
                        a1 * 1e3,
                        (b or 0) * 1e3,
                        a1 / b if b else "-",
                        "tilec <= 0.3 ms",
                        lib.verdict(a1 * 1e3, 0.3),
                    ]
                )
        a2 = summ.get(f"tilec:{k}", {}).get("hit_in_process_s", {}).get("median")
        b2 = summ.get(f"triton:{k}", {}).get("hit_in_process_s", {}).get("median")
        if a2 is not None:
            rows.append(
                [
                    f"warm hit, same process {k} (ms)",
                    a2 * 1e3,
                    (b2 or 0) * 1e3,
                    a2 / b2 if b2 else "-",
                    "(context)",
                    "-",
                ]
            )
        a3 = summ.get(f"tilec:{k}", {}).get("first_call_total_s", {}).get("median")
        b3 = summ.get(f"triton:{k}", {}).get("first_call_total_s", {}).get("median")
        if a3 is not None and b3:
            rows.append([f"first call (hit+load+launch) {k} (ms)", a3 * 1e3, b3 * 1e3, a3 / b3, "(context)", "-"])
    return rows


def floor_table(summ: dict[str, Any]) -> list[list[Any]]:
    """Rows of the hit beside its floor (see the module's docstring), per kernel."""

    def med(key: str, field: str) -> float | None:
        value = summ.get(key, {}).get(field, {})
        return value.get("median") if isinstance(value, dict) else None

    hit_kind = next((k for k in ("tilec-hit-shortcut", "tilec-shortcut") if f"{k}:vadd" in summ), None)
    floor_kind = next((k for k in ("floor", "floor-cuda") if f"{k}:vadd" in summ), None)
    if hit_kind is None or floor_kind is None:
        return []
    rows: list[list[Any]] = []

    def row(label: str, key: str, field: str, scale: float = 1e3) -> None:
        values = [med(f"{key}:{k}", field) for k in TRITON_KERNELS]
        if any(v is not None for v in values):
            rows.append([label, *[v * scale if v is not None else "-" for v in values]])

    row(f"tilec hit through the shortcut ({hit_kind})", hit_kind, "compile_hit_s")
    row(f"baseline tilec hit through the shortcut ({BASELINE}{hit_kind})", BASELINE + hit_kind, "compile_hit_s")
    env = "tilec-hit-env-shortcut"
    row(f"tilec hit, Settings from the environment ({env})", env, "compile_hit_s")
    row(f"baseline tilec hit, Settings from the environment ({BASELINE}{env})", BASELINE + env, "compile_hit_s")
    row("floor: read + digest + stat + head line", floor_kind, "floor_s")
    row("  read the shortcut file", floor_kind, "read_s")
    row("  BLAKE2b of its bytes", floor_kind, "digest_s")
    watched = summ.get(f"{floor_kind}:vadd", {}).get("watched")
    row(f"  stat the {watched} watched paths", floor_kind, "stat_s")
    row("  the shortcut's head line", floor_kind, "head_s")
    row("tilec's kernel object from those bytes (head -> kernel)", floor_kind, "kernel_object_s")
    ratios = []
    for k in TRITON_KERNELS:
        a, b = med(f"{hit_kind}:{k}", "compile_hit_s"), med(f"{floor_kind}:{k}", "floor_s")
        ratios.append(a / b if a and b else "-")
    rows.append(["hit / floor", *ratios])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="report directory ($OUT, else reports/)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=40, help="cold compiles of tilec and Triton timed in pairs "
                    "(bench/tilec_cold_pairs.py), per kernel; the cold goal's verdict is theirs (0: none)")
    ap.add_argument("--fresh", type=int, default=3, help="fresh processes per warm measurement")
    ap.add_argument(
        "--only",
        choices=["cold", "hit"],
        help="cold: only the cold compile (e.g. for a prototype wheel); hit: only tilec's warm hits, no GPU",
    )
    ap.add_argument("--target", help="sm_XX to compile for (default: device 0's); children inherit it")
    ap.add_argument("--child")
    ap.add_argument("--kernel")
    ap.add_argument("--cache")
    ap.add_argument("--spec", help="(children) what a floor child reads and stats, as JSON")
    ap.add_argument(
        "--baseline",
        metavar="PYTHON",
        help="also measure the tilec of this interpreter (e.g. a venv with main's wheel) in the warm-hit "
        "children, its fresh processes taking turns with this one's",
    )
    ap.add_argument(
        "--baseline-site",
        metavar="DIR",
        help="the baseline tilec is installed in DIR (pip install --target), run by --baseline or this "
        "interpreter; DIR replaces this tilec's directory on PYTHONPATH in its children",
    )
    a = ap.parse_args()
    a.baseline_spec = (
        Baseline(a.baseline or sys.executable, a.baseline_site) if a.baseline or a.baseline_site else None
    )
    if a.target:
        os.environ["TILEC_BENCH_TARGET"] = a.target
    if a.child:
        spec = json.loads(a.spec) if a.spec else None
        print("RESULT " + json.dumps(child(a.child, a.kernel, Path(a.cache), spec)), flush=True)
        return 0

    work = Path(tempfile.mkdtemp(prefix="tilec-bench-compile-"))
    if a.only == "hit":
        return hit_only(a, work)
    os.environ["TRITON_CACHE_DIR"] = str(work / "triton-cache")  # before Triton reads it
    import torch

    torch.cuda.init()
    # The children inherit it: asking torch for the device in a child would be timed with its hit.
    os.environ.setdefault("TILEC_BENCH_TARGET", lib.sm_target())
    info = lib.machine()
    res: dict[str, Any] = {"bench": "compile", "machine": info, "errors": {}}
    res["method"] = {
        "reps": a.reps,
        "fresh_processes": a.fresh,
        "n": N,
        "expsin_iters": ITERS,
        "tilec_cold": "llvmlite module built + tilec.compile into an empty cache dir (miss + write); "
        "process warmed by compiling another kernel first",
        "triton_cold": "triton.compile of the kernel's JIT specialization with always_compile, after "
        "the process compiled another kernel and this kernel's first specialization",
        "cold_pairs": "one tilec cold compile and one Triton cold compile back to back, the order swapping, "
        "--pairs times per kernel (bench/tilec_cold_pairs.py); the goal's ratio is the median of the pairs' ratios",
        "warm": "fresh python process; imports and CUDA context before timing; compile_hit_s = "
        "the compile call hitting the disk cache (tilec.compile / triton.compile inside the JIT)",
    }
    errors: dict[str, str] = res["errors"]
    with lib.section("tilec cold compile", errors):
        res["cold_tilec"] = tilec_cold(a.reps, work, info)
    specs: dict[str, tuple[Any, Any, Any]] = {}
    with lib.section("triton cold compile", errors):
        res["cold_triton"] = triton_cold(a.reps, specs)
    if a.pairs:
        with lib.section("tilec and Triton cold compiles in pairs", errors):
            from bench.tilec_cold_pairs import pairs  # it imports this module

            res["cold_pairs"] = pairs(a.pairs, target(), work / "pairs", specs)
    with lib.section("correctness (seeds the warm caches)", errors):
        res["correctness_rel_err"] = correctness_and_seed(work)
    if a.only != "cold":
        with lib.section("warm cache hits in fresh processes", errors):
            res["warm"] = warm(a.fresh, work, baseline=a.baseline_spec)
    rows = ratios(res)
    res["ratios"] = [dict(zip(("what", "tilec", "triton", "ratio", "goal", "verdict"), r, strict=True)) for r in rows]
    path = lib.out_dir(a.out) / "bench-compile.json"
    lib.write_json(path, res)
    print(f"wrote {path}")
    print(f"GPU: {info.get('gpu')}  tilec LLVM {info.get('tilec_llvm')}  Triton {info.get('triton')}")
    print(lib.table(["compile", "tilec", "triton", "tilec/triton", "goal", "verdict"], rows))
    floor = floor_table(res.get("warm", {}).get("summary", {}))
    if floor:
        print("\nhit and floor, fresh processes with a CUDA context (ms, medians)")
        print(lib.table(["", *TRITON_KERNELS], floor))
    return 1 if errors else 0


def hit_only(a: argparse.Namespace, work: Path) -> int:
    """tilec's warm hits with no GPU: fresh-process compile calls and the hit path's parts."""
    import platform

    os.environ.setdefault("TILEC_BENCH_TARGET", "sm_90")
    res: dict[str, Any] = {
        "bench": "compile-hit",
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "target": target(),
            # The children's times depend on what else runs: say how loaded the machine was.
            "loadavg_start": os.getloadavg(),
        },
        "errors": {},
    }
    if a.baseline_spec is not None:
        res["baseline"] = {"python": a.baseline_spec.python, "site": a.baseline_spec.site}
    errors: dict[str, str] = res["errors"]
    with lib.section("warm cache hits in fresh processes (no GPU)", errors):
        kinds = ("tilec-hit", "tilec-hit-shortcut", "tilec-hit-env-shortcut", "floor")
        res["warm"] = warm(a.fresh, work, kinds=kinds, baseline=a.baseline_spec)
    res["machine"]["loadavg_end"] = os.getloadavg()
    with contextlib.suppress(ImportError):
        import tilec

        res["tilec"] = str(Path(tilec.__file__).parent)
    rows = ratios(res)
    res["ratios"] = [dict(zip(("what", "tilec", "triton", "ratio", "goal", "verdict"), r, strict=True)) for r in rows]
    path = lib.out_dir(a.out) / "bench-compile-hit.json"
    lib.write_json(path, res)
    print(f"wrote {path}")
    print(lib.table(["compile", "tilec", "triton", "tilec/triton", "goal", "verdict"], rows))
    floor = floor_table(res.get("warm", {}).get("summary", {}))
    if floor:
        print("\nhit and floor, fresh processes (ms, medians)")
        print(lib.table(["", *TRITON_KERNELS], floor))
    for key, v in res.get("warm", {}).items():
        if key.startswith("tilec-parts"):
            print(f"\n{key} (ms)")
            a1, a2 = v["first_in_process"], v["second_in_process"]
            print(lib.table(["part", "fresh process", "again"], [[n, a1[n] * 1e3, a2[n] * 1e3] for n in a1]))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
