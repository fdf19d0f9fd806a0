"""Helpers shared by the test tiers (a plain module, so any tier can import it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the gpu tier loads this module where hermetic is not installed
    from hermetic.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def hermetic(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would."""
    proc = subprocess.run(
        [sys.executable, "-m", "hermetic", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"hermetic {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def resolve_in_project(tmp_path: Path, cli: dict[str, Any] | None = None, env: dict[str, str] | None = None,
                       table: str = "") -> Settings:
    """Settings resolved in a fresh project under tmp_path: this checkout's recipes, `table` as its [tool.hermetic]."""
    from hermetic.settings import resolve

    root = tmp_path / "proj"
    shutil.copytree(ROOT / "recipes", root / "recipes")
    (root / "pyproject.toml").write_text(f"[tool.hermetic]\n{table}\n")
    return resolve({"root": str(root), **(cli or {})}, env or {}, tmp_path)
