"""Every import of the project's own code in bench/ and devtools/, function bodies included, names a module
that exists in this checkout. The benches import lazily (they run where torch or a GPU may be missing), so a
module that moved breaks them only on the GPU runner, after its LLVM build: this finds it here, in a second."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the project's own top-level packages and where their sources are
OWN = {"bench": ROOT / "bench", "devtools": ROOT / "devtools", "hermetic": ROOT / "src" / "hermetic",
       "tilec": ROOT / "src" / "compiler" / "tilec"}
BENCH_MODULES = {p.stem for p in (ROOT / "bench").glob("*.py")}


def _module_path(dotted: str) -> Path | None:
    top, *rest = dotted.split(".")
    base = OWN[top].joinpath(*rest)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _guarded(tree: ast.AST) -> set[int]:
    """Line numbers of imports inside `try: ... except ImportError` (a fallback for older wheels)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers
        ):
            lines |= {n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Import | ast.ImportFrom)}
    return lines


def _bound(module: Path) -> set[str]:
    """The names a module binds at its top level (what `from module import NAME` can take)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    guarded = _guarded(tree)
    found = []
    for node in ast.walk(tree):
        if node.lineno in guarded if isinstance(node, ast.Import | ast.ImportFrom) else True:
            continue
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in names:
            top = name.split(".")[0]
            if top in BENCH_MODULES and top not in OWN:
                found.append(f"{where}: `import {name}`: bench is a package, import it as bench.{top}")
            elif top in OWN and _module_path(name) is None:
                found.append(f"{where}: no module {name} in this checkout")
            elif isinstance(node, ast.ImportFrom) and top in OWN and node.level == 0:
                init = _module_path(name)
                assert init is not None
                bound = _bound(init)
                for alias in node.names:
                    if _module_path(f"{name}.{alias.name}") is None and not ({alias.name, "__getattr__"} & bound):
                        found.append(f"{where}: {name} has no {alias.name}")
    return found


@pytest.mark.parametrize(
    "path", sorted([*(ROOT / "bench").glob("*.py"), *(ROOT / "devtools").rglob("*.py")]), ids=lambda p: p.name
)
def test_own_imports_resolve(path: Path) -> None:
    assert _problems(path) == []


def test_the_check_finds_a_moved_module(tmp_path: Path) -> None:
    bad = ROOT / "bench" / "_import_check_probe.py"
    bad.write_text("def f():\n    import tilec_compile\n    from tilec.backends.cuda import aot\n"
                   "    from bench import no_such_bench\n")
    try:
        problems = _problems(bad)
    finally:
        bad.unlink()
    assert len(problems) == 3, problems
