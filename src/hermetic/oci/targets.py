"""Where a pull writes: the target directory checked before anything is fetched, and parents made undoably."""

from __future__ import annotations

import os
from pathlib import Path

from hermetic.core.errors import UsageError


def pull_target(text: str, option: str) -> Path:
    """The absolute target of `--unpack DIR` / `--layout DIR`, refused now if a pull could only fail there.

    A target needs a name (hermetic stages beside it, in a fresh directory of its own), and must be new
    or, for --unpack, an empty directory; for --layout, an empty directory or an image layout.
    """
    dest = Path(os.path.abspath(text))
    if not dest.name:
        raise UsageError(
            f"{option} {text}: cannot write into {dest}",
            "a pull makes a new directory (or fills an empty one) and stages beside it, so it needs a directory below /",
            f"pass a new directory, e.g. {option} ./rootfs",
        )
    if os.path.islink(dest) or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"{dest} exists and is not a directory", "", f"choose another {option} directory")
    if dest.is_dir() and any(dest.iterdir()):
        if option != "--layout":
            raise UsageError(
                f"{dest} is not empty",
                "unpacking replaces the directory as a whole, and hermetic only replaces what it wrote; nothing was written",
                f"pass a new or empty {option} directory",
            )
        if not (dest / "oci-layout").exists():
            raise UsageError(
                f"{dest} exists and is not an image layout",
                "hermetic only replaces directories it wrote; nothing was written",
                f"choose an empty or new {option} directory",
            )
    return dest


def make_parents(path: Path) -> list[Path]:
    """mkdir -p path; returns the directories it made, deepest first (for `remove_created`)."""
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    made = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue  # made by someone else meanwhile: not ours to remove
        made.append(d)
    return made[::-1]


def remove_created(dirs: list[Path]) -> None:
    """Remove the directories `make_parents` made, deepest first, as long as they are empty."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return
