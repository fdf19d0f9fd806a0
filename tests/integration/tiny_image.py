"""A small real image for the signing and in-toto tests: a few files under an LLVM-like prefix, written by
hermetic's own image writer (until the lead's tiny test recipe lands; then its fixture replaces this)."""

from __future__ import annotations

from pathlib import Path

from hermetic.oci.layout import ImageResult, ImageSpec, write_image

PREFIX = "/usr/lib64/llvm-tiny-1.0.0"
EPOCH = 1700000000


def tiny_tree(root: Path, marker: bytes = b"0") -> Path:
    """An install root: a header, a static library's bytes and a CMake file; `marker` changes one byte."""
    base = root / PREFIX.lstrip("/")
    for sub in ("include/tiny", "lib/cmake/tiny"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "include" / "tiny" / "tiny.h").write_bytes(b"int tiny(void);\n")
    (base / "lib" / "libtiny.a").write_bytes(b"!<arch>\n" + marker * 64)
    (base / "lib" / "cmake" / "tiny" / "TinyConfig.cmake").write_text("set(TINY_FOUND TRUE)\n")
    return root


def tiny_image(root: Path, output: Path, arch: str = "amd64") -> ImageResult:
    spec = ImageSpec(
        variant="tiny", version="1.0.0", prefix=PREFIX, install_root=root, epoch=EPOCH, arch=arch, os="linux",
        recipe={"name": "tiny", "version": "1.0.0", "digest": "sha256:" + "1" * 64}, sources=(),
        tree_digest="sha256:" + "2" * 64,
    )
    return write_image(spec, output)
