"""The tiny recipe's release archive, written from tests/recipes/tiny-src the way hermetic writes a pruned archive.

The tests hand it to hermetic through a mirror directory (`--mirror`), as a user hands over an archive they
downloaded: hermetic admits it only by the sha256 that tests/recipes/tiny/conandata.yml pins, so an edit of
the source tree that is not pinned again fails the fetch (and tests/unit/test_tiny_recipe.py names the new digest).
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import yaml

from hermetic.fetch.prune import write_archive

HERE = Path(__file__).resolve().parent
RECIPE = HERE / "tiny"
SOURCES = HERE / "tiny-src"


def pinned(version: str | None = None) -> dict[str, str]:
    """The archive entry conandata.yml pins for `version` (default: its default_version)."""
    data = yaml.safe_load((RECIPE / "conandata.yml").read_text())
    entry = data["sources"][version or data["default_version"]]
    archive: dict[str, str] = entry["archives"][0]
    return archive | {"source_date_epoch": str(entry["source_date_epoch"])}


def write(mirror: Path, version: str | None = None) -> Path:
    """Write the release archive of `version` into the directory `mirror`; returns its path."""
    pin = pinned(version)
    top = SOURCES / pin["strip_root"]
    members: dict[str, tuple[tarfile.TarInfo, bytes]] = {}
    for path in sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = path.relative_to(top).as_posix()
        info = tarfile.TarInfo(rel)
        info.mode = path.stat().st_mode & 0o777
        info.mtime = int(pin["source_date_epoch"])
        members[rel] = (info, path.read_bytes())
    return write_archive(mirror / pin["file"], pin["strip_root"], members, int(pin["source_date_epoch"]))
