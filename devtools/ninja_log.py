"""A ninja log (.ninja_log) read: its edges, by kind, and the seconds at least one edge of each kind ran."""

from __future__ import annotations

import re
from typing import Any


def kind(output: str) -> str:
    if output.endswith(".o"):
        return "compile"
    if output.endswith((".inc", ".def")) or re.search(r"include/llvm/.*\.h$", output):
        return "tablegen"
    if output.endswith(".a"):
        return "archive"
    if "/install-" in output or output.endswith(("install", "install/strip")):
        return "install"
    if output.startswith("bin/") or "/bin/" in output:
        return "link"
    return "other"


def union_s(spans: list[tuple[int, int]]) -> float:
    """Seconds covered by at least one of the (start, end) spans, in ms."""
    total, last = 0, -1
    for s, e in sorted(spans):
        if e <= last:
            continue
        total += e - max(s, last)
        last = e
    return round(total / 1000, 1)


def ninja_edges(text: str) -> list[tuple[int, int, str]]:
    """(start ms, end ms, first output) per edge: an edge with several outputs is logged once per output."""
    seen: dict[tuple[int, int, str], str] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        start, end, _mtime, output, cmdhash = line.split("\t")
        seen.setdefault((int(start), int(end), cmdhash), output)
    return [(s, e, out) for (s, e, _), out in seen.items()]


def ninja_breakdown(text: str) -> dict[str, Any]:
    edges = ninja_edges(text)
    by: dict[str, list[tuple[int, int]]] = {}
    for s, e, out in edges:
        by.setdefault(kind(out), []).append((s, e))
    return {
        "edges": len(edges),
        "span_s": round(max(e for _, e, _ in edges) / 1000, 1),
        "kinds": {k: {"edges": len(v), "edge_s_summed": round(sum(e - s for s, e in v) / 1000, 1),
                      "running_s": union_s(v), "last_end_s": round(max(e for _, e in v) / 1000, 1)}
                  for k, v in sorted(by.items())},
        "longest": [{"output": out, "s": round((e - s) / 1000, 1), "started_s": round(s / 1000, 1)}
                    for s, e, out in sorted(edges, key=lambda x: x[0] - x[1])[:5]],
    }
