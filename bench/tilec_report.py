"""Markdown from the benchmark JSON: reports/bench-{compile,launch,bandwidth}.md.

    python3 -m bench.tilec_report [--dir reports]

Tables only (numbers, ratios, goals, the stage-dump counts); the reading of them is
in reports/bench-summary.md.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any


def _f(v: Any, nd: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.2f}"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _machine(m: dict[str, Any]) -> str:
    keys = [
        ("GPU", "gpu"),
        ("SMs", "gpu_sm_count"),
        ("nvidia-smi", "nvidia_smi"),
        ("CPU", "cpu"),
        ("torch", "torch"),
        ("Triton", "triton"),
        ("Triton's ptxas", "triton_ptxas_version"),
        ("tilec", "tilec"),
        ("tilec's LLVM", "tilec_llvm"),
        ("tilec's ptxas", "tilec_ptxas_version"),
        ("tilec's nvPTXCompiler", "tilec_nvptxcompiler"),
        ("cuda-bindings", "cuda-bindings"),
        ("nvJitLink (experiment)", "nvjitlink"),
        ("tilec wheel", "tilec_wheel"),
        ("commit", "commit"),
    ]
    return "\n".join(f"- {label}: {m.get(k)}" for label, k in keys)


def _ops(d: dict[str, Any] | str | None) -> str:
    if not d:
        return "-"
    if isinstance(d, str):
        return d
    return ", ".join(f"`{k}` x{v}" for k, v in d.items())


def _errors(r: dict[str, Any]) -> str:
    errs = r.get("errors") or {}
    if not errs:
        return ""
    return "\n## Errors\n\n" + "\n".join(f"- {k}:\n\n```\n{v[-1500:]}\n```" for k, v in errs.items()) + "\n"


def _corr(v: Any) -> str:
    if isinstance(v, float):
        return f"rel. err {v:.2e}"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_ops(x) if isinstance(x, dict) else x}" for k, x in v.items())
    return str(v)


def _within(w: dict[str, Any] | None) -> list[str]:
    """The cache-off compiles split by stage, timed inside tilec.compile (ms). The spread is
    shown: a ptxas process's time varies by several ms between compiles of the same PTX."""
    if not w:
        return []
    rows = [[k, *(_ms(v.get(s)) for s in ("median", "min", "max"))] for k, v in w.items()]
    return ["Inside the cache-off compiles (ms):", "", _table(["part", "median", "min", "max"], rows), ""]


def compile_md(r: dict[str, Any]) -> str:
    lines = [
        "# Compile latency: tilec vs Triton",
        "",
        "Produced by `bench/tilec_compile.py` on the GPU runner. Raw numbers: [bench-compile.json](bench-compile.json).",
        "",
        _machine(r["machine"]),
        "",
        "## Ratios and goals",
        "",
        _table(
            ["measurement", "tilec", "Triton", "tilec/Triton", "goal", "verdict"],
            [[x["what"], x["tilec"], x["triton"], x["ratio"], x["goal"], x["verdict"]] for x in r.get("ratios", [])],
        ),
        "",
        "## Method",
        "",
        *[f"- {k}: {v}" for k, v in r.get("method", {}).items()],
        "",
        "## Cold compile, stage by stage (median ms)",
        "",
    ]
    ct, ctr = r.get("cold_tilec", {}), r.get("cold_triton", {})
    for name, v in ct.items():
        if not isinstance(v, dict):
            continue
        st = v.get("stages_s", {})
        lines += [
            f"### tilec `{name}`",
            "",
            f"cold (empty cache dir) {_ms(v['cold_s'].get('median'))} ms; cache off {_ms(v['cold_nocache_s'].get('median'))} ms; "
            f"with Triton's ptxas {_ms(v['cold_with_triton_ptxas_s'].get('median'))} ms; building the llvmlite module "
            f"{_ms(v['build_ir_s'].get('median'))} ms. Registers {v.get('registers')}, libdevice linked {v.get('libdevice_linked')}.",
            "",
            _table(["stage", "ms"], [[k, _ms(x) if isinstance(x, float) else x] for k, x in st.items()]),
            "",
            *_within(v.get("cold_nocache_within_s")),
            f"PTX memory ops: {_ops(v.get('ptx_ops'))}",
            "",
        ]
    for name, v in ctr.items():
        if not isinstance(v, dict):
            continue
        st = v.get("stages_s", {})
        lines += [
            f"### Triton `{name}` (BLOCK={v.get('block')}, num_warps={v.get('num_warps')})",
            "",
            f"cold {_ms(v['cold_s'].get('median'))} ms; first JIT specialization in the warm process "
            f"{_ms(v.get('jit_first_specialization_s'))} ms.",
            "",
            _table(["stage", "ms"], [[k, _ms(x)] for k, x in st.items()]),
            "",
            f"PTX memory ops: {_ops(v.get('ptx_ops'))}",
            "",
        ]
    if "process_warmup_s" in ctr:
        lines += [f"Triton's first compile in the process (excluded): {_ms(ctr['process_warmup_s'])} ms.", ""]
    w = r.get("warm", {})
    if w:
        lines += ["## Warm: cache hit in a fresh process (median ms over fresh processes)", ""]
        rows = []
        floors = []
        parse = "head line"
        for key, s in w.get("summary", {}).items():
            if "floor_s" in s:  # the floor child measures other parts than a hit (bench/tilec_compile.py)
                # Reports before the shortcut's head timed the entry's JSON line there instead.
                step = "head_s" if "head_s" in s else "json_s"
                parse = "head line" if step == "head_s" else "JSON line"
                floors.append([key, *(_ms(s[k].get("median")) for k in ("floor_s", "read_s", "digest_s", "stat_s", step,
                                                                         "kernel_object_s"))])
                continue
            rows.append(
                [
                    key,
                    _ms(s["compile_hit_s"].get("median")),
                    _ms(s["hit_in_process_s"].get("median")),
                    _ms(s["first_launch_s"].get("median")),
                    _ms(s["first_call_total_s"].get("median")),
                ]
            )
        lines += [
            _table(
                [
                    "framework:kernel",
                    "compile hit (fresh)",
                    "hit again (same process)",
                    "first launch",
                    "first call total",
                ],
                rows,
            ),
            "",
        ]
        if floors:
            lines += ["### The floor of a hit: the same bytes read, checked and parsed in straight-line code (median ms)", "",
                      _table(["floor:kernel", "floor", "read", "digest", "stat", parse, "kernel object (beside)"], floors),
                      ""]
        for key, v in w.items():
            if key.startswith("tilec-parts"):
                lines += [f"### {key}: where tilec's cache hit goes (ms)", ""]
                a, b = v["first_in_process"], v["second_in_process"]
                lines += [
                    _table(["part", "fresh process", "same process again"], [[k, _ms(a[k]), _ms(b[k])] for k in a]),
                    "",
                ]
    if r.get("correctness_rel_err"):
        lines += [
            "## Correctness (before timing), and the nvJitLink experiment's cubins",
            "",
            *[f"- {k}: {_corr(v)}" for k, v in r["correctness_rel_err"].items()],
            "",
        ]
    return "\n".join(lines) + _errors(r)


def _table_path(v: bool | None) -> str:
    if v is None:
        return "not recorded (a tilec without the table path)"
    return "yes (one C call per tensor)" if v else "no (is_cuda, get_device() and data_ptr() per tensor)"


def launch_md(r: dict[str, Any]) -> str:
    lines = [
        "# Host launch overhead: tilec vs Triton vs raw cuLaunchKernel",
        "",
        "Produced by `bench/tilec_launch.py` on the GPU runner. Raw numbers: [bench-launch.json](bench-launch.json).",
        "",
        _machine(r["machine"]),
        "",
        "## Ratios and goals (median microseconds per launch)",
        "",
        _table(
            ["launch path", "us/launch", "x Triton", "x raw", "goal", "verdict"],
            [
                [x["what"], x["us_per_launch"], x["vs_triton"], x["vs_raw"], x["goal"], x["verdict"]]
                for x in r.get("ratios", [])
            ],
        ),
        "",
        "## Method",
        "",
        *[f"- {k}: {v}" for k, v in r.get("method", {}).items()],
        f"- torch tensors read through DLPack's C exchange table: {_table_path(r.get('torch_tensor_via_dlpack_table'))}",
        "",
    ]
    res = r.get("results", {})
    if res:
        lines += [
            "## Spread",
            "",
            _table(
                ["launch path", "median us", "p10 us", "p90 us", "incl. final sync us"],
                [
                    [
                        n,
                        v["per_launch_s"]["median"] * 1e6,
                        v["per_launch_s"]["p10"] * 1e6,
                        v["per_launch_s"]["p90"] * 1e6,
                        v["per_launch_incl_sync_s"]["median"] * 1e6,
                    ]
                    for n, v in res.items()
                ],
            ),
            "",
        ]
    bd = r.get("tilec_breakdown_s")
    if bd:
        lines += [
            "## Where tilec's launch goes (each piece alone, best of 5 x 20000 calls)",
            "",
            _table(["piece", "us"], [[k, v * 1e6] for k, v in bd.items()]),
            "",
        ]
    if r.get("aot"):
        lines += ["## AOT C launcher", "", "```", json.dumps(r["aot"], indent=1), "```", ""]
    lines += ["## Correctness (before timing)", "", *[f"- {k}: {v}" for k, v in r.get("correctness", {}).items()], ""]
    return "\n".join(lines) + _errors(r)


def bandwidth_md(r: dict[str, Any]) -> str:
    lines = [
        "# Bandwidth: tilec vs Triton vs device-to-device copy",
        "",
        "Produced by `bench/tilec_bandwidth.py` on the GPU runner. Raw numbers: [bench-bandwidth.json](bench-bandwidth.json).",
        "",
        _machine(r["machine"]),
        "",
        "## Ratios and goals (GB/s: bytes that must move / median time)",
        "",
        _table(
            [
                "kernel",
                "tilec GB/s (best variant)",
                "Triton GB/s (best variant)",
                "tilec/Triton",
                "tilec/copy",
                "goal",
                "verdict",
            ],
            [
                [
                    x["what"],
                    x["tilec_gbps"],
                    x["triton_gbps"],
                    x["tilec_over_triton"],
                    x["tilec_over_copy"],
                    x["goal"],
                    x["verdict"],
                ]
                for x in r.get("ratios", [])
            ],
        ),
        "",
        "## Method",
        "",
        *[f"- {k}: {v}" for k, v in r.get("method", {}).items()],
        "",
    ]

    def variants(results: dict[str, Any]) -> str:
        return _table(
            ["variant", "GB/s", "pass 1 GB/s", "pass 2 GB/s", "median us"],
            [[n, v["gbps"], v["gbps_passes"][0], v["gbps_passes"][1], v["median_s"] * 1e6] for n, v in results.items()],
        )

    va = r.get("vadd")
    if va:
        lines += [f"## Vector add, n = {va['n']}", "", variants(va["results"]), "", "Stage dumps (memory ops):", ""]
        for n, d in va.get("dumps", {}).items():
            lines.append(f"- {n}: PTX {_ops(d.get('ptx'))}; SASS {_ops(d.get('sass'))}")
        lines += ["", *[f"- check {k}: {v}" for k, v in va.get("correctness", {}).items()], ""]
    rs = r.get("rowsum")
    if rs:
        for shape, s in rs.get("shapes", {}).items():
            lines += [f"## Row sum {shape}", "", variants(s["results"]), ""]
            lines += [f"- rel. err vs float64 {k}: {v:.2e}" for k, v in s.get("rel_err_vs_float64", {}).items()]
            lines.append("")
        lines += ["Stage dumps (memory ops):", ""]
        for n, d in rs.get("dumps", {}).items():
            lines.append(f"- {n}: PTX {_ops(d.get('ptx'))}; SASS {_ops(d.get('sass'))}")
        lines.append("")
    return "\n".join(lines) + _errors(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=str(Path(__file__).resolve().parents[1] / "reports"))
    a = ap.parse_args()
    d = Path(a.dir)
    for name, fn in (
        ("compile", compile_md),
        ("compile-proto", compile_md),
        ("launch", launch_md),
        ("bandwidth", bandwidth_md),
    ):
        src = d / f"bench-{name}.json"
        if not src.exists():
            print(f"skip {src} (missing)")
            continue
        text = fn(json.loads(src.read_text()))
        if name == "compile-proto":
            text = text.replace(
                "# Compile latency: tilec vs Triton",
                "# Compile latency with a prototype tilec wheel (lazy libdevice; not in the repo)\n\n"
                "The wheel was built from src/compiler with one line changed in csrc/core.cpp "
                "(`llvm::parseIRFile` -> `llvm::getLazyIRFileModule` for libdevice); see bench-summary.md.",
            ).replace(
                "[bench-compile.json](bench-compile.json)", "[bench-compile-proto.json](bench-compile-proto.json)"
            )
            # The run labelled both wheels alike; this one is the patched build.
            text = re.sub(
                r"^- tilec wheel: src/compiler@(\w+) against (.*?) \(sha256 \w+\)$",
                r"- tilec wheel: the prototype (src/compiler@\1 + the lazy-libdevice line) against \2 "
                r"(the JSON's tilec_wheel label names the unpatched wheel)",
                text,
                flags=re.M,
            )
        (d / f"bench-{name}.md").write_text(text)
        print(f"wrote {d / f'bench-{name}.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
