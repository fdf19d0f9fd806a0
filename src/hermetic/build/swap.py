"""Swapping a finished tree in: a build (or a substitute's pull) is prepared under WORK/<build>/.new and
replaces the previous install tree, test_package and record only once it is whole; a journal lets the next
run finish or undo a swap that was cut off."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

NEW = ".new"


_SWAPPED = ("install", "test_package")


_JOURNAL = ".swap"


def staging_dir(out: Path) -> Path:
    """Where a tree is prepared before swap_in: built here, or unpacked from a substitute (substitute.py)."""
    return out / NEW


def swap_in(new: Path, out: Path, tree_digest: str, keep_build: bool = False) -> None:
    """Replace the previous install tree and record with the new ones (new/install, new/test_package, new/record.json).

    Renames are atomic one by one, not together: a journal naming the new tree lets `recover`
    finish or undo a swap that was cut off.
    """
    (out / _JOURNAL).write_text(tree_digest + "\n")
    for name in _SWAPPED:
        old = out / f".old-{name}"
        shutil.rmtree(old, ignore_errors=True)
        if (out / name).exists():
            os.rename(out / name, old)
        os.rename(new / name, out / name)
    os.replace(new / "record.json", out / "record.json")  # the commit point
    for name in _SWAPPED:
        shutil.rmtree(out / f".old-{name}", ignore_errors=True)
    (out / _JOURNAL).unlink()
    if keep_build and (new / "conan-home").is_dir():
        # --keep-build: the build directory (Conan home) of the build now in place, for inspection
        shutil.rmtree(out / "conan-home", ignore_errors=True)
        os.rename(new / "conan-home", out / "conan-home")
    shutil.rmtree(new, ignore_errors=True)


def swap_pending(out: Path) -> bool:
    """Whether a swap was cut off (recover() finishes or undoes it)."""
    return (out / _JOURNAL).is_file()


def recover(out: Path) -> None:
    """Finish or undo a swap that was interrupted (see swap_in)."""
    journal = out / _JOURNAL
    if not journal.is_file():
        return
    committed = False
    try:
        committed = json.loads((out / "record.json").read_text())["tree"]["digest"] == journal.read_text().strip()
    except (OSError, ValueError, KeyError, TypeError):
        committed = False
    for name in _SWAPPED:
        old = out / f".old-{name}"
        if not old.exists():
            continue
        if committed:
            shutil.rmtree(old, ignore_errors=True)
        else:
            shutil.rmtree(out / name, ignore_errors=True)
            os.rename(old, out / name)
    journal.unlink()
