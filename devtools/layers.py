"""The import layers of src/hermetic: each module's layer is 1 + the highest layer it imports.

    python3 -m devtools.layers [--max N] [ROOT]

Prints the modules of each layer and the longest chain; exits 1 when a module sits above --max (default 7)
or the modules import each other in a circle. Every import counts, those under `if TYPE_CHECKING:` and
inside functions too: a module that names a type depends on where that type lives as much as one that calls
it, and the house's own measure counts them so. Run by tests/unit/test_layers.py, so CI keeps the bound.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

MAX_LAYERS = 7


def modules(src: Path) -> dict[str, Path]:
    """Every module of the hermetic package under src, by dotted name (a package by its __init__)."""
    found = {}
    for path in sorted((src / "hermetic").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports anywhere in it (`from pkg import mod` counts as mod)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def layers(graph: dict[str, set[str]]) -> tuple[dict[str, int], list[list[str]]]:
    """Each module's layer, and the import circles found (a circle has no layering: its modules count once)."""
    depth: dict[str, int] = {}
    circles: list[list[str]] = []
    stack: list[str] = []

    def visit(n: str) -> int:
        if n in depth:
            return depth[n]
        if n in stack:
            circles.append([*stack[stack.index(n):], n])
            return 0
        stack.append(n)
        got = 1 + max((visit(m) for m in sorted(graph[n])), default=0)
        stack.pop()
        depth[n] = got
        return got

    for n in sorted(graph):
        visit(n)
    return depth, circles


def longest(graph: dict[str, set[str]], depth: dict[str, int]) -> list[str]:
    n = max(depth, key=lambda m: (depth[m], m))
    out = [n]
    while graph[n] and n not in out[:-1]:  # (a circle ends where it comes back)
        n = max(graph[n], key=lambda m: (depth[m], m))
        out.append(n)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m devtools.layers", description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--max", type=int, default=MAX_LAYERS, help=f"the most layers allowed (default {MAX_LAYERS})")
    args = parser.parse_args(argv)
    known = modules(args.root / "src")
    graph = {n: imports(n, p, known) for n, p in known.items()}
    depth, circles = layers(graph)
    for layer in range(1, max(depth.values()) + 1):
        names = sorted(n.removeprefix("hermetic.") for n, d in depth.items() if d == layer)
        print(f"{layer}: {' '.join(names)}")
    print("longest: " + " -> ".join(n.removeprefix("hermetic.") for n in longest(graph, depth)))
    top = max(depth.values())
    if circles:
        for c in circles:
            print("error: import circle: " + " -> ".join(c), file=sys.stderr)
        return 1
    if top > args.max:
        print(f"error: {top} layers, at most {args.max} allowed: move what the longest chain's upper module needs "
              "down, or inject it from the layer that calls both", file=sys.stderr)
        return 1
    print(f"layers: {top} (at most {args.max})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
