"""Where a pull writes: the target directory checked before anything is fetched, and parents made undoably."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core.errors import UsageError
from hermetic.oci.layout import Layout
from hermetic.oci.types import LayoutRef, _shown, parse_reference

if TYPE_CHECKING:
    from hermetic.oci.types import Reference


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


_TAG_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _no_such_path(path: str, how: str) -> UsageError:
    return UsageError(
        f"{path}: no such file or directory",
        how,
        "check the path; a local image is an OCI image layout directory (written by `hermetic image llvm` "
        "or `skopeo copy … oci:DIR`), given as DIR or oci:DIR[:TAG]",
    )


def _exists(path: Path) -> bool:
    """Whether a path exists; text too long for a path (or otherwise unusable as one) does not."""
    try:
        return path.exists()
    except OSError:
        return False


def _local_layout(path: Path, tag: str, text: str) -> LayoutRef:
    if not _exists(path):
        raise _no_such_path(str(path), f"{text!r} names a local image layout")
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory", f"{text!r} names a local image layout", "pass a layout directory")
    Layout(path).check()  # "not an OCI image layout", with what to do
    return LayoutRef(path, tag)


def parse_image_source(text: str) -> Reference | LayoutRef:
    """A registry reference or a local OCI image layout.

    `oci:PATH[:TAG]` is a layout (TAG selects by org.opencontainers.image.ref.name; a PATH
    that exists as given wins over splitting off a tag); so is an existing directory holding
    an `oci-layout` file. Text that can only be a path (absolute, ./, ../, ~) and does not
    exist is "no such file or directory", never a registry host to look up.
    """
    if text.startswith("oci:"):
        rest = text[4:]
        if not rest:
            raise UsageError(f"invalid image source {text!r}", "oci: needs a path", "write oci:DIR or oci:DIR:TAG")
        path, tag = rest, ""
        if not _exists(Path(rest).expanduser()) and ":" in rest:
            head, _, maybe_tag = rest.rpartition(":")
            if head and maybe_tag and "/" not in maybe_tag and not set(maybe_tag) - _TAG_CHARS:
                path, tag = head, maybe_tag
        return _local_layout(Path(path).expanduser(), tag, text)
    if text.startswith(("/", "./", "../", "~")) or text in (".", ".."):
        return _local_layout(Path(text).expanduser(), "", text)
    if _exists(Path(text) / "oci-layout") and (Path(text) / "oci-layout").is_file():
        return LayoutRef(Path(text))
    try:
        return parse_reference(text)
    except UsageError as exc:
        first, slash, _ = text.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost") and not _exists(Path(text)):
            raise  # REGISTRY/…: a reference with a mistake, not a path
        if os.sep in text or not _exists(Path(text)):
            raise UsageError(
                f"{_shown(text)}: no such file or directory, and not an image reference",
                f"{exc.why}; or a local OCI image layout directory (DIR or oci:DIR[:TAG])",
                exc.fix,
            ) from None
        raise
