"""Bar charts for the performance page, drawn as SVG from the reports' JSON when the docs are built."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

# Colours by role; text follows the page's colour (currentColor) so the dark theme reads too.
COLOURS = {"ours": "#2f6fb0", "anchor": "#9a9a9a", "other": "#d98b2b"}
ROW = 26
LABEL_W = 280
BAR_W = 340
VALUE_W = 160


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    role: str = "ours"  # ours | anchor | other
    text: str = ""  # the value as printed; default: the value with the chart's unit


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    bars: tuple[Bar, ...]
    sources: tuple[str, ...]  # the reports the values were read from, relative to the repository
    log: bool = False


def _scale(chart: Chart) -> Callable[[float], float]:
    top = max(b.value for b in chart.bars)
    if not chart.log:
        return lambda v: BAR_W * v / top
    low = 10 ** math.floor(math.log10(min(b.value for b in chart.bars)))
    span = math.log10(top) - math.log10(low)
    return lambda v: BAR_W * (math.log10(v) - math.log10(low)) / span if span else BAR_W


def _fmt(value: float, unit: str) -> str:
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:,.{digits}f} {unit}".strip()


def svg(chart: Chart) -> str:
    """The chart as an inline SVG element: one row per bar, its label, the bar and the value."""
    if not chart.bars or any(b.value <= 0 for b in chart.bars):
        raise ValueError(f"{chart.title}: every bar needs a positive value")
    scale = _scale(chart)
    width = LABEL_W + BAR_W + VALUE_W
    height = 30 + ROW * len(chart.bars) + 10
    rows = []
    for i, b in enumerate(chart.bars):
        y = 30 + i * ROW
        w = max(scale(b.value), 2.0)
        text = b.text or _fmt(b.value, chart.unit)
        rows.append(
            f'<text x="{LABEL_W - 8}" y="{y + 16}" text-anchor="end">{escape(b.label)}</text>'
            f'<rect class="bar-{b.role}" x="{LABEL_W}" y="{y + 4}" width="{w:.1f}" height="{ROW - 8}" '
            f'fill="{COLOURS[b.role]}"><title>{escape(b.label)}: {escape(text)}</title></rect>'
            f'<text x="{LABEL_W + w + 6:.1f}" y="{y + 16}">{escape(text)}</text>'
        )
    scale_note = " (log scale)" if chart.log else ""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="report-plot" role="img" viewBox="0 0 {width} {height}" '
        f'width="100%" style="max-width:{width}px" font-family="sans-serif" font-size="13" fill="currentColor">'
        f"<title>{escape(chart.title)}</title>"
        f'<text x="0" y="18" font-weight="bold">{escape(chart.title)}{scale_note}</text>'
        + "".join(rows)
        + "</svg>"
    )


# -- the charts of the performance page: each reads its reports ------------------------------------------


class Reports:
    """Reads report JSON under a repository's reports/ and remembers which files a chart used."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.used: list[str] = []

    def __call__(self, rel: str) -> Any:
        path = self.root / "reports" / rel
        self.used.append(f"reports/{rel}")
        return json.loads(path.read_text())


def build_commands(r: Reports) -> Chart:
    support, nvptx, lite = r("llvm-size-support.json"), r("llvm-size-nvptx.json"), r("llvm-size-llvmlite.json")
    return Chart(
        "Build commands per variant, against LLVM's default configuration of the same release", "",
        (
            Bar("support (19.1.7)", support["variant_commands"]),
            Bar("nvptx (19.1.7)", nvptx["variant_commands"]),
            Bar("LLVM 19.1.7, default configuration", nvptx["default_config_commands"], "anchor"),
            Bar("llvmlite (22.1.8)", lite["variant_commands"]),
            Bar("LLVM 22.1.8, default configuration", lite["default_config_commands"], "anchor"),
        ),
        tuple(r.used),
    )


def layer_sizes(r: Reports) -> Chart:
    support, nvptx = r("oci-zstd-support.json"), r("oci-zstd-nvptx.json")
    anchors = {name.removesuffix(" (compressed)"): mb for name, mb in r("oci-support.json")["anchors_mb"].items()}
    return Chart(
        "Compressed image layer per variant, against the LLVM builds it replaces", "MB",
        (
            Bar("support, zstd", support["zstd"]["mb"]),
            Bar("support, gzip", support["gzip"]["mb"]),
            Bar("nvptx, zstd", nvptx["zstd"]["mb"]),
            Bar("nvptx, gzip", nvptx["gzip"]["mb"]),
            *(Bar(name, mb, "anchor") for name, mb in sorted(anchors.items(), key=lambda kv: kv[1])),
        ),
        tuple(r.used),
        log=True,
    )


def build_times(r: Reports) -> Chart:
    debian, runner = r("nvptx-zig-debian.json"), r("runner-zig.json")
    local = r("distributed-support.json")["local"]
    arm = {b["jobs"]: b["wall_time_s"] for b in r("nvptx-arm64/summary.json")["builds"]}
    minutes = [
        ("support, 2 cores", local["wall_s"]),
        ("support, 16 cores", runner["step_wall_s"]["build-support"]),
        ("nvptx, 2 cores", debian["debian"]["wall_time_s"]),
        ("nvptx, 16 cores", runner["step_wall_s"]["build-llvm"]),
        ("nvptx for arm64 (cross), 2 cores", arm[2]),
        ("nvptx for arm64 (cross), 16 cores", arm[16]),
    ]
    return Chart(
        "Cold build of a variant with the pinned zig toolchain", "min",
        tuple(Bar(label, s / 60, text=f"{s / 60:.1f} min ({s:.0f} s)") for label, s in minutes),
        tuple(r.used),
    )


def _ratio(rows: Sequence[dict[str, Any]], what: str) -> dict[str, Any]:
    for row in rows:
        if row["what"] == what:
            return row
    raise KeyError(f"no row {what!r} in the bench's ratios")


# the run of record of tilec against Triton (docs/performance.md)
TILEC_RUN = "runner-zig-h100-2026-11-27/tilec-bench"


def tilec_launch(r: Reports) -> Chart:
    rows = r(f"{TILEC_RUN}/bench-launch.json")["ratios"]
    pick = [
        ("tilec k[grid, block](tensors)", "tilec", "ours"),
        ("raw cuLaunchKernel (cuda-python, packed params)", "raw cuLaunchKernel from cuda-python", "anchor"),
        ("triton kernel[grid](tensors)", "Triton 3.6", "other"),
    ]
    return Chart(
        "Host time per kernel launch from Python, one H100", "µs",
        tuple(Bar(label, _ratio(rows, what)["us_per_launch"], role) for what, label, role in pick),
        tuple(r.used),
    )


def tilec_cold(r: Reports) -> Chart:
    rows = r(f"{TILEC_RUN}/bench-compile.json")["ratios"]
    bars: list[Bar] = []
    for kernel in ("vadd", "vadd_v8", "expsin"):
        default = _ratio(rows, f"cold IR->cubin {kernel}, default (auto: nvptxcompiler) (ms)")
        ptxas = _ratio(rows, f"cold IR->cubin {kernel}, assembler=ptxas (ms)")
        bars += [Bar(f"{kernel}: tilec (auto: nvPTXCompiler)", default["tilec"]),
                 Bar(f"{kernel}: tilec (ptxas)", ptxas["tilec"], "anchor"),
                 Bar(f"{kernel}: Triton 3.6", default["triton"], "other")]
    return Chart("Cold compile, IR to cubin, one H100", "ms", tuple(bars), tuple(r.used))


def tilec_hit(r: Reports) -> Chart:
    rows = r(f"{TILEC_RUN}/bench-compile.json")["ratios"]
    bars: list[Bar] = []
    for kernel in ("vadd", "expsin"):
        row = _ratio(rows, f"warm hit, fresh process {kernel}, tilec-shortcut (ms)")
        bars += [Bar(f"{kernel}: tilec (source_key=)", row["tilec"]),
                 Bar(f"{kernel}: Triton 3.6", row["triton"], "other")]
    return Chart("Cache hit in a fresh process, after import, one H100", "ms", tuple(bars), tuple(r.used), log=True)


CHARTS: dict[str, Callable[[Reports], Chart]] = {
    "build-commands": build_commands,
    "layer-sizes": layer_sizes,
    "build-times": build_times,
    "tilec-launch": tilec_launch,
    "tilec-cold": tilec_cold,
    "tilec-hit": tilec_hit,
}


def chart(name: str, root: Path) -> Chart:
    """The named chart with its values read from ROOT/reports now."""
    if name not in CHARTS:
        raise KeyError(f"no chart {name!r}; known: {', '.join(CHARTS)}")
    return CHARTS[name](Reports(root))
