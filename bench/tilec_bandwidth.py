"""Bandwidth: vector add over 2^28 float32 and a row sum, tilec against Triton and a device copy.

    python3 -m bench.tilec_bandwidth [--out DIR] [--reps 30]

Every kernel is checked against torch on fresh random inputs (output poisoned with NaN
first) before it is timed. Times are CUDA events around single launches on the current
stream, after warm-up, rotating over two input sets (each 1 GiB or more per array, far
beyond L2); the figure is the median. GB/s counts the bytes each kernel must move:
vector add 3 x 4 x n (two reads, one write), row sum 4 x rows x cols + 4 x rows,
device copy 2 x bytes (read + write). The whole list is timed twice (pass 1 and 2) to
show the run-to-run spread.

Variants: tilec's scalar kernel (one float per thread, as the gpu test tier writes it) and
vector kernels (<4 x float> loads); Triton at two BLOCK sizes (and num_warps for the
row sum). Both sides' best variant is compared; every variant is in the JSON.

Writes bench-bandwidth.json; prints a table of ratios last.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bench import tilec_benchlib as lib

VADD_N = 1 << 28
ROW_SHAPES = [(32768, 8192), (262144, 1024), (4096, 65536)]
SETS = 2


def time_events(launch: Callable[[int], Any], reps: int, warmup: int = 5) -> list[float]:
    """Seconds per launch from CUDA events, launch(i) using input set i % SETS."""
    import torch

    for i in range(warmup):
        launch(i)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        launch(i)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]


def vadd(res: dict[str, Any], reps: int) -> None:
    import tilec
    import torch

    from bench import tilec_kernels as K
    from bench import tilec_triton

    n = VADD_N
    stream = torch.cuda.current_stream().cuda_stream
    sets = [
        (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.empty(n, device="cuda"))
        for _ in range(SETS)
    ]
    target = lib.sm_target()
    kernels = {
        "tilec scalar (1 float/thread)": (tilec.compile(K.vadd_scalar(tilec.ir), target=target), 1),
        "tilec v4 (1 x <4 x float>/thread)": (tilec.compile(K.vadd_vec(tilec.ir, 1), target=target), 4),
        "tilec v8 (2 x <4 x float>/thread)": (tilec.compile(K.vadd_vec(tilec.ir, 2), target=target), 8),
    }
    variants: dict[str, Callable[[int], Any]] = {}
    dumps: dict[str, Any] = {}
    for name, (k, per_thread) in kernels.items():
        threads = 256
        grid = (n + threads * per_thread - 1) // (threads * per_thread)

        def launch(i: int, k: Any = k, grid: int = grid, threads: int = threads) -> None:
            a, b, out = sets[i % SETS]
            k[grid, threads](a, b, out, n, stream=stream)

        variants[name] = launch
        dumps[name] = {
            "ptx": lib.ptx_ops(k.asm["ptx"]),
            "sass": lib.sass_ops(k.asm["cubin"]),
            "registers": k.metadata.registers,
            "block": threads,
            "grid": grid,
        }
    for block in (1024, 4096):

        def tlaunch(i: int, block: int = block) -> Any:
            a, b, out = sets[i % SETS]
            return tilec_triton.vadd[(triton_cdiv(n, block),)](a, b, out, n, BLOCK=block)

        name = f"triton BLOCK={block}"
        variants[name] = tlaunch
    copy_src, copy_dst = sets[0][0], sets[1][2]
    variants["torch device-to-device copy (1 GiB)"] = lambda i: copy_dst.copy_(sets[i % SETS][0])

    # Correctness first, on fresh inputs, output poisoned.
    checks: dict[str, str] = {}
    for name, launch in variants.items():
        if name.startswith("torch"):
            continue
        for s in sets:
            s[0].copy_(torch.randn(n, device="cuda"))
            s[1].copy_(torch.randn(n, device="cuda"))
            s[2].fill_(float("nan"))
        for i in range(SETS):
            r = launch(i)
            if name.startswith("triton") and r is not None:
                k = r
                dumps[name] = {
                    "ptx": lib.ptx_ops(k.asm["ptx"]),
                    "sass": lib.sass_ops(k.asm["cubin"]),
                    "num_warps": k.metadata.num_warps,
                }
        torch.cuda.synchronize()
        for a, b, out in sets:
            if not torch.equal(out, a + b):
                raise AssertionError(f"{name}: vector add differs from torch a + b")
        checks[name] = "ok (bit-equal to torch a + b, both input sets)"
    del copy_src
    results = run_passes(variants, reps)
    nbytes = {name: (2 * 4 * n if name.startswith("torch") else 3 * 4 * n) for name in variants}
    res["vadd"] = {
        "n": n,
        "bytes_per_launch": {k: v for k, v in nbytes.items()},
        "correctness": checks,
        "dumps": dumps,
        "results": with_gbps(results, nbytes),
    }


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def run_passes(variants: dict[str, Callable[[int], Any]], reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {name: {} for name in variants}
    for p in (1, 2):
        for name, launch in variants.items():
            out[name][f"pass{p}_s"] = lib.stats(time_events(launch, reps))
    return out


def with_gbps(results: dict[str, Any], nbytes: dict[str, int]) -> dict[str, Any]:
    for name, r in results.items():
        meds = [r[f"pass{p}_s"]["median"] for p in (1, 2)]
        r["median_s"] = min(meds)
        r["gbps"] = nbytes[name] / r["median_s"] / 1e9
        r["gbps_passes"] = [nbytes[name] / m / 1e9 for m in meds]
    return results


def rowsum(res: dict[str, Any], reps: int) -> None:
    import tilec
    import torch

    from bench import tilec_kernels as K
    from bench import tilec_triton

    target = lib.sm_target()
    stream = torch.cuda.current_stream().cuda_stream
    tk = {u: tilec.compile(K.row_sum(tilec.ir, u), target=target) for u in (1, 2, 4)}
    out_shapes: dict[str, Any] = {}
    dumps: dict[str, Any] = {
        f"tilec unroll={u}": {
            "ptx": lib.ptx_ops(k.asm["ptx"]),
            "sass": lib.sass_ops(k.asm["cubin"]),
            "registers": k.metadata.registers,
        }
        for u, k in tk.items()
    }
    for rows, cols in ROW_SHAPES:
        xs = [torch.randn(rows, cols, device="cuda") for _ in range(SETS)]
        outs = [torch.empty(rows, device="cuda") for _ in range(SETS)]
        variants: dict[str, Callable[[int], Any]] = {}
        for u, k in tk.items():
            for threads in (128, 256, 512):

                def launch(
                    i: int,
                    k: Any = k,
                    threads: int = threads,
                    xs: Any = xs,
                    outs: Any = outs,
                    rows: int = rows,
                    cols: int = cols,
                ) -> None:
                    k[rows, threads](xs[i % SETS], outs[i % SETS], cols, stream=stream)

                variants[f"tilec unroll={u} threads={threads}"] = launch
        for block in (1024, 4096):
            for warps in (4, 8):
                if block > cols and block != 1024:
                    continue

                def tlaunch(
                    i: int,
                    block: int = block,
                    warps: int = warps,
                    xs: Any = xs,
                    outs: Any = outs,
                    rows: int = rows,
                    cols: int = cols,
                ) -> Any:
                    return tilec_triton.rowsum[(rows,)](
                        xs[i % SETS], outs[i % SETS], cols, BLOCK=block, num_warps=warps
                    )

                variants[f"triton BLOCK={block} num_warps={warps}"] = tlaunch
        checks: dict[str, Any] = {}
        for name, launch in variants.items():
            for x, o in zip(xs, outs, strict=True):
                x.copy_(torch.randn(rows, cols, device="cuda"))
                o.fill_(float("nan"))
            for i in range(SETS):
                r = launch(i)
                if name.startswith("triton") and r is not None and name not in dumps:
                    dumps[name] = {"ptx": lib.ptx_ops(r.asm["ptx"]), "sass": lib.sass_ops(r.asm["cubin"])}
            torch.cuda.synchronize()
            errs = []
            for x, o in zip(xs, outs, strict=True):
                if torch.isnan(o).any():
                    raise AssertionError(f"{name} {rows}x{cols}: unwritten rows")
                ref = x.double().sum(dim=1)
                errs.append(float(torch.linalg.vector_norm(o.double() - ref) / torch.linalg.vector_norm(ref)))
            if not max(errs) < 1e-5:
                raise AssertionError(f"{name} {rows}x{cols}: relative error {max(errs):.3g}")
            checks[name] = max(errs)
        results = run_passes(variants, reps)
        nbytes = {name: 4 * rows * cols + 4 * rows for name in variants}
        out_shapes[f"{rows}x{cols}"] = {
            "rows": rows,
            "cols": cols,
            "rel_err_vs_float64": checks,
            "results": with_gbps(results, nbytes),
        }
        variants.clear()
        xs.clear()
        outs.clear()
        torch.cuda.empty_cache()
    res["rowsum"] = {"shapes": out_shapes, "dumps": dumps}


def best(results: dict[str, Any], prefix: str) -> tuple[str, float] | None:
    cand = [(n, r["gbps"]) for n, r in results.items() if n.startswith(prefix)]
    return max(cand, key=lambda x: x[1]) if cand else None


def bw_verdict(results: dict[str, Any], t: tuple[str, float], tr: tuple[str, float]) -> str:
    """met when >= Triton; a shortfall smaller than the pass-to-pass spread is a tie, not a miss."""
    ratio = t[1] / tr[1]
    if ratio >= 1.0:
        return "met"
    spread = max(abs(p[0] - p[1]) / max(p) for p in (results[t[0]]["gbps_passes"], results[tr[0]]["gbps_passes"]))
    return f"tie (within {spread:.1%} spread)" if 1.0 - ratio <= spread else "missed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import torch

    torch.cuda.init()
    info = lib.machine()
    res: dict[str, Any] = {"bench": "bandwidth", "machine": info, "errors": {}}
    res["method"] = {
        "timing": "CUDA events around each launch, median of reps after 5 warm-ups, two passes, "
        "rotating over 2 input sets; the better pass median is reported (both kept)",
        "reps": a.reps,
        "vadd_n": VADD_N,
        "row_shapes": ROW_SHAPES,
    }
    errors: dict[str, str] = res["errors"]
    with lib.section("vector add 2^28", errors):
        vadd(res, a.reps)
    with lib.section("row sum", errors):
        rowsum(res, a.reps)

    rows: list[list[Any]] = []
    v = res.get("vadd", {}).get("results", {})
    if v:
        t, tr = best(v, "tilec"), best(v, "triton")
        cp = v.get("torch device-to-device copy (1 GiB)", {}).get("gbps")
        sc = v.get("tilec scalar (1 float/thread)", {}).get("gbps")
        if t and tr:
            rows.append(
                [
                    "vadd 2^28 f32 best",
                    f"{t[1]:.0f} ({t[0]})",
                    f"{tr[1]:.0f} ({tr[0]})",
                    t[1] / tr[1],
                    t[1] / cp if cp else "-",
                    ">= 1.0 x triton",
                    bw_verdict(v, t, tr),
                ]
            )
        if sc and tr:
            rows.append(
                [
                    "vadd 2^28 f32 scalar kernel",
                    f"{sc:.0f}",
                    f"{tr[1]:.0f}",
                    sc / tr[1],
                    sc / cp if cp else "-",
                    "(context)",
                    "-",
                ]
            )
        if cp:
            rows.append(["device-to-device copy", f"{cp:.0f}", "-", "-", 1.0, "(ceiling)", "-"])
    cp = v.get("torch device-to-device copy (1 GiB)", {}).get("gbps") if v else None
    for shape, s in res.get("rowsum", {}).get("shapes", {}).items():
        t, tr = best(s["results"], "tilec"), best(s["results"], "triton")
        if t and tr:
            rows.append(
                [
                    f"row sum {shape}",
                    f"{t[1]:.0f} ({t[0]})",
                    f"{tr[1]:.0f} ({tr[0]})",
                    t[1] / tr[1],
                    t[1] / cp if cp else "-",
                    ">= 1.0 x triton",
                    bw_verdict(s["results"], t, tr),
                ]
            )
    res["ratios"] = [
        dict(
            zip(
                ("what", "tilec_gbps", "triton_gbps", "tilec_over_triton", "tilec_over_copy", "goal", "verdict"),
                r,
                strict=True,
            )
        )
        for r in rows
    ]
    path = lib.out_dir(a.out) / "bench-bandwidth.json"
    lib.write_json(path, res)
    print(f"wrote {path}")
    print(f"GPU: {info.get('gpu')}  (GB/s = bytes that must move / median time)")
    print(lib.table(["kernel", "tilec GB/s", "triton GB/s", "tilec/triton", "tilec/copy", "goal", "verdict"], rows))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
