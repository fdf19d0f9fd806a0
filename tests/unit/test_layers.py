"""The house's layers stay at most devtools.layers.MAX_LAYERS deep, without import circles."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import layers

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_keeps_its_layers(capsys: pytest.CaptureFixture[str]) -> None:
    assert layers.main([str(ROOT)]) == 0, capsys.readouterr().err
    shown = capsys.readouterr().out
    assert shown.startswith("1: ") and "longest: __main__ -> cli." in shown


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in {"hermetic/__init__.py": "", **files}.items():
        (tmp_path / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / rel).write_text(text)
    return tmp_path


def test_a_chain_too_deep_and_a_circle_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = _package(tmp_path / "deep", {"hermetic/a.py": "from hermetic import b\n", "hermetic/b.py": "import hermetic.c\n",
                                        "hermetic/c.py": ""})
    assert layers.main([str(deep), "--max", "3"]) == 0
    assert layers.main([str(deep), "--max", "2"]) == 1
    assert "3 layers, at most 2" in capsys.readouterr().err
    circle = _package(tmp_path / "circle", {"hermetic/a.py": "from hermetic.b import x\n", "hermetic/b.py": "from hermetic import a\n"})
    assert layers.main([str(circle)]) == 1
    assert "import circle: hermetic.a -> hermetic.b -> hermetic.a" in capsys.readouterr().err


def test_imports_for_annotations_count_too(tmp_path: Path) -> None:
    """A type named only under TYPE_CHECKING still ties the module to the one holding it."""
    pkg = _package(tmp_path, {
        "hermetic/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hermetic import b\nelse:\n    import hermetic.c\n",
        "hermetic/b.py": "", "hermetic/c.py": "def f():\n    from hermetic import b\n"})
    known = layers.modules(pkg / "src")
    assert layers.imports("hermetic.a", known["hermetic.a"], known) == {"hermetic.b", "hermetic.c"}
    assert layers.imports("hermetic.c", known["hermetic.c"], known) == {"hermetic.b"}
    assert layers.main([str(pkg), "--max", "2"]) == 1
