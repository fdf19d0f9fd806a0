"""The architectures hermetic builds for, by their OCI names, and what zig, Conan, LLVM and qemu call them."""

from __future__ import annotations

import platform
from dataclasses import dataclass

# zig's name of an architecture, Conan's, and the name of zig's libc include directories.
ARCHES = {"x86_64": ("x86_64", "x86"), "aarch64": ("armv8", "aarch64")}


@dataclass(frozen=True)
class Platform:
    """An architecture by its OCI name (`--arch`, the image platform) and what the other tools call it."""

    oci: str  # amd64 | arm64
    zig: str  # a key of ARCHES: zig's target arch (toolchains.yml `arches`), whose Conan name ARCHES gives
    machines: tuple[str, ...]  # what platform.machine() says on such a machine
    llvm_triple: str  # LLVM_HOST_TRIPLE of a cross build: what LLVM infers when built natively there
    emulator: tuple[str, ...]  # how another machine runs its programs: qemu-user with the cross loader/libc
    packages: tuple[str, ...]  # the Debian packages that provide the emulator
    elf_machine: int  # e_machine of its ELF binaries: how a program (a foreign Python) tells its architecture
    loader: str  # its dynamic loader, relative to a root (`qemu-user -L ROOT` runs the root's programs)
    llvm_target: str  # LLVM's target for its code: what a JIT running there (llvmlite's) compiles for


PLATFORMS = {
    "amd64": Platform("amd64", "x86_64", ("x86_64", "amd64"), "x86_64-unknown-linux-gnu",
                      ("qemu-x86_64-static", "-L", "/usr/x86_64-linux-gnu"), ("qemu-user-static", "libc6-amd64-cross"),
                      62, "lib64/ld-linux-x86-64.so.2", "X86"),
    "arm64": Platform("arm64", "aarch64", ("aarch64", "arm64"), "aarch64-unknown-linux-gnu",
                      ("qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu"), ("qemu-user-static", "libc6-arm64-cross"),
                      183, "lib/ld-linux-aarch64.so.1", "AArch64"),
}


def machine_arch() -> str:
    """This machine's OCI architecture name (amd64, arm64), or platform.machine() when it is neither."""
    here = platform.machine().lower()
    return next((p.oci for p in PLATFORMS.values() if here in p.machines), here)


def zig_arch(oci: str) -> str:
    """The toolchain's (zig's) name of an OCI architecture; a name the table lacks stays as it is."""
    return PLATFORMS[oci].zig if oci in PLATFORMS else oci


def oci_arch(zig: str) -> str:
    return next((p.oci for p in PLATFORMS.values() if p.zig == zig), zig)
