"""A cubin's sections by name, and where two cubins' sections differ (ptxas, nvPTXCompiler)."""

from __future__ import annotations

import struct

# The one section that differs between ptxas and nvPTXCompiler of one release: the tools' build
# string ("Build cuda_13.0.r13.0/compiler..." against "Build system must define ...").
BUILD_NOTE = ".note.nv.tkinfo"


def sections(image: bytes) -> dict[str, bytes]:
    """Every section of a 64-bit little-endian ELF (a cubin) by name, with its bytes (empty for
    sections that occupy none); ValueError where `image` is not such a file."""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(image) or shstrndx >= shnum:
        raise ValueError("the ELF section table lies outside the file")
    headers = []
    for i in range(shnum):
        name, kind, _, _, offset, size = struct.unpack_from("<IIQQQQ", image, shoff + i * shentsize)
        headers.append((name, kind, offset, size))
    names_at, names_size = headers[shstrndx][2], headers[shstrndx][3]
    names = image[names_at : names_at + names_size]
    out: dict[str, bytes] = {}
    for index, (name, kind, offset, size) in enumerate(headers):
        end = names.find(b"\0", name)
        label = names[name:end].decode(errors="replace") if end >= 0 else f"#{index}"
        if label in out:
            label = f"{label}#{index}"
        out[label] = b"" if kind == 8 else image[offset : offset + size]  # 8: SHT_NOBITS
    return out


def differing_sections(a: bytes, b: bytes, ignore: tuple[str, ...] = (BUILD_NOTE,)) -> list[str]:
    """The names of the sections whose bytes differ (or that only one cubin has), `ignore`d ones
    left out; empty when the two cubins hold the same code and data."""
    sa, sb = sections(a), sections(b)
    names = sorted(set(sa) | set(sb))
    return [n for n in names if n not in ignore and sa.get(n) != sb.get(n)]
