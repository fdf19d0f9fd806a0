"""The pinned toolchains as data (toolchain/toolchains.yml): what each is, what it targets, which one a build uses."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from hermetic.core.errors import EnvironmentError_, UsageError
from hermetic.core.platforms import ARCHES, PLATFORMS, machine_arch, oci_arch, zig_arch

# the value type lives in core (the wrappers below the model take it); its users know it from here too
from hermetic.core.toolchain import TARGET
from hermetic.core.toolchain import UNPACK_LAYOUT as UNPACK_LAYOUT
from hermetic.core.toolchain import WRAPPERS_VERSION as WRAPPERS_VERSION
from hermetic.core.toolchain import SlimPin as SlimPin
from hermetic.core.toolchain import Toolchain as Toolchain

if TYPE_CHECKING:
    from hermetic.core.platforms import Platform

KINDS = ("zig", "host")


_GLIBC = re.compile(r"^2\.(\d+)$")


@dataclass(frozen=True)
class Catalog:
    path: Path
    default: str
    toolchains: tuple[Toolchain, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.toolchains)


def _fail(path: Path, why: str) -> UsageError:
    return UsageError(f"malformed toolchain data in {path}", why, "compare with git")


def _glibc_tuple(value: str) -> tuple[int, int]:
    m = _GLIBC.match(value)
    if not m:
        raise ValueError(value)
    return (2, int(m.group(1)))


def load(toolchain_dir: Path) -> Catalog:
    """toolchain/toolchains.yml as frozen dataclasses, validated."""
    path = toolchain_dir / "toolchains.yml"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"toolchain data missing: {path}", "", "restore it from the repository") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"cannot parse {path}", str(exc), "fix the YAML syntax") from exc
    if not isinstance(data, dict) or not isinstance(data.get("toolchains"), dict) or not data["toolchains"]:
        raise _fail(path, "expected a mapping `toolchains:` with at least one entry")
    out: list[Toolchain] = []
    for name, t in data["toolchains"].items():
        if not isinstance(t, dict):
            raise _fail(path, f"toolchain {name!r} is not a mapping")
        kind = str(t.get("kind", ""))
        if kind not in KINDS:
            raise _fail(path, f"toolchain {name!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if kind == "host":
            out.append(Toolchain(name=str(name), kind=kind, description=str(t.get("description", ""))))
            continue
        missing = [k for k in ("package", "version", "file", "sha256", "clang_version", "target", "arches", "glibc_min")
                   if not t.get(k)]
        if missing:
            raise _fail(path, f"toolchain {name!r} lacks {', '.join(missing)}")
        sha = str(t["sha256"]).lower()
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise _fail(path, f"toolchain {name!r}: sha256 {t['sha256']!r} is not 64 hex digits")
        arches = tuple(str(a) for a in t["arches"])
        bad = [a for a in arches if a not in ARCHES]
        if bad:
            raise _fail(path, f"toolchain {name!r}: unknown arches {', '.join(bad)}; known: {', '.join(ARCHES)}")
        tc = Toolchain(
            name=str(name),
            kind=kind,
            description=str(t.get("description", "")),
            version=str(t["version"]),
            package=str(t["package"]),
            file=str(t["file"]),
            sha256=sha,
            clang_version=str(t["clang_version"]),
            target=str(t["target"]),
            arches=arches,
            glibc_min=str(t["glibc_min"]),
            source_date_epoch=int(t.get("source_date_epoch", 0)),
        )
        m = TARGET.match(tc.target)
        if not m or m.group("arch") not in arches or not m.group("glibc"):
            raise _fail(path, f"toolchain {name!r}: target {tc.target!r} is not <arch>-linux-gnu.2.NN of {arches}")
        if "slim" in t:
            tc = replace(tc, slim=_slim_pin(path, tc, t["slim"]))
        out.append(tc)
    default = str(data.get("default", ""))
    if default not in [t.name for t in out]:
        raise _fail(path, f"default {default!r} names no toolchain")
    return Catalog(path, default, tuple(out))


def _slim_pin(path: Path, tc: Toolchain, data: object) -> SlimPin:
    where = f"toolchain {tc.name!r}: slim"
    if not isinstance(data, dict) or set(data) != {"file", "sha256", "size"}:
        raise _fail(path, f"{where} must be a mapping of exactly file, sha256 and size")
    sha = str(data["sha256"]).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise _fail(path, f"{where} sha256 {data['sha256']!r} is not 64 hex digits")
    size = data["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise _fail(path, f"{where} size {size!r} is not a positive number of bytes")
    # `hermetic toolchain slim` writes this name; another one would never be found in a mirror.
    if data["file"] != slim_name(tc):
        raise _fail(path, f"{where} file {data['file']!r} is not {slim_name(tc)!r}, the name derived from "
                          "name, version and arches")
    return SlimPin(slim_name(tc), sha, size)


def select(catalog: Catalog, name: str | None = None, glibc: str | None = None, arch: str | None = None) -> Toolchain:
    """The named toolchain (the default when None), with its target's glibc floor or arch changed."""
    name = name or catalog.default
    tc = next((t for t in catalog.toolchains if t.name == name), None)
    if tc is None:
        raise UsageError(
            f"unknown toolchain {name!r}",
            f"{catalog.path} defines no such toolchain",
            f"valid toolchains: {', '.join(catalog.names())}",
        )
    if tc.kind == "host":
        if glibc:
            raise UsageError(
                f"--glibc {glibc} does not apply to the host toolchain",
                "the machine's compiler links against the machine's own glibc",
                "drop --glibc / HERMETIC_GLIBC, or use --toolchain zig",
            )
        here = machine_arch()
        if arch and arch != zig_arch(here):
            raise UsageError(
                f"--arch {oci_arch(arch)} needs a cross compiler; the host toolchain builds for this {here} machine only",
                "the machine's compiler, headers and libraries are its own architecture's",
                f"use --toolchain zig --arch {oci_arch(arch)}, or drop --arch / HERMETIC_ARCH",
            )
        return tc
    new_arch = arch or tc.arch
    if new_arch not in tc.arches:
        raise UsageError(f"toolchain {tc.name} does not target {new_arch}", "", f"valid: {', '.join(tc.arches)}")
    floor = glibc or tc.glibc
    try:
        if _glibc_tuple(floor) < _glibc_tuple(tc.glibc_min):
            raise UsageError(
                f"glibc floor {floor} is below what {tc.name} {tc.version} supports",
                f"zig links against glibc stubs from {tc.glibc_min} on",
                f"use --glibc {tc.glibc_min} or higher",
            )
    except ValueError as exc:
        raise UsageError(f"invalid glibc floor {floor!r}", "expected 2.NN, e.g. 2.28", "use e.g. --glibc 2.28") from exc
    return _replace_target(tc, f"{new_arch}-linux-gnu.{floor}")


def select_recorded(catalog: Catalog, name: str, target: str, glibc: str) -> Toolchain:
    """This checkout's toolchain of the name, glibc floor and arch of the target a record names (a record's
    ToolchainRef: its identity may differ, callers compare)."""
    arch = target.split("-", 1)[0] if target else None
    return select(catalog, name, glibc or None, arch)


def _replace_target(tc: Toolchain, target: str) -> Toolchain:
    return replace(tc, target=target)


def target_arch(tc: Toolchain) -> str:
    """The OCI architecture a toolchain builds for: its target's, or this machine's for host."""
    return oci_arch(tc.arch) if tc.kind == "zig" else machine_arch()


def for_build_machine(tc: Toolchain) -> Toolchain | None:
    """For a cross build, the same pinned toolchain targeting this machine; None when `tc` targets it.

    A cross build runs programs it compiles (LLVM's tablegen): those must be built for the build
    machine, by the same pinned compiler, so the host's compiler takes no part there either.
    """
    if tc.kind == "host":
        return None
    here = machine_arch()
    if zig_arch(here) == tc.arch:
        return None
    if zig_arch(here) not in tc.arches:
        raise EnvironmentError_(
            f"toolchain {tc.name} cannot build on this {here} machine",
            f"it targets {', '.join(tc.arches)} only, and a cross build needs programs for the build machine",
            "build on an amd64 or arm64 machine",
        )
    return _replace_target(tc, f"{zig_arch(here)}-linux-gnu.{tc.glibc}")


def emulator(arch: str, root: Path | None = None) -> tuple[str, ...]:
    """The command line that runs a program of `arch` on this machine: qemu-user and the cross loader/libc,
    or (with `root`) the loader and libraries of that root, such as an arm64 Python's.

    Checked before a cross build starts, so a missing package fails in seconds, not after the compile.
    """
    plat = PLATFORMS[arch]
    fix = f"install Debian's {' and '.join(plat.packages)}: apt-get install -y {' '.join(plat.packages)}"
    qemu = shutil.which(plat.emulator[0])
    if qemu is None:
        raise EnvironmentError_(
            f"cannot run {arch} programs on this {machine_arch()} machine: {plat.emulator[0]} is not on PATH",
            "a cross build's test_package and a foreign Python run under qemu-user", fix,
        )
    sysroot = root if root is not None else Path(plat.emulator[-1])
    if not (os.path.lexists(sysroot / plat.loader) or any(sysroot.glob("lib/ld-linux*.so*"))):
        raise EnvironmentError_(
            f"cannot run {arch} programs on this {machine_arch()} machine: {sysroot} holds no {arch} loader",
            f"{plat.emulator[0]} -L {sysroot} takes the dynamic loader ({plat.loader}) and glibc from there",
            fix if root is None else f"make {sysroot} a complete {arch} root (README, \"The arm64 wheel\")",
        )
    return (qemu, *plat.emulator[1:-1], str(sysroot))


def elf_machine(header: bytes) -> int | None:
    """e_machine of an ELF header (its first 20 bytes), or None when it is no ELF file."""
    if len(header) < 20 or header[:4] != b"\x7fELF" or header[5] not in (1, 2):
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def binary_platform(path: Path) -> Platform | None:
    """The platform whose programs `path` is (after symlinks), or None: no ELF file, or one of no known platform."""
    try:
        with open(path, "rb") as f:
            machine = elf_machine(f.read(20))
    except OSError:
        return None
    return next((p for p in PLATFORMS.values() if p.elf_machine == machine), None)


def program_root(path: Path, plat: Platform) -> Path | None:
    """The nearest directory above `path` holding `plat`'s loader: the root qemu-user runs it with (-L)."""
    for d in Path(os.path.realpath(path)).parents:
        if os.path.lexists(d / plat.loader):
            return d
    return None


def for_root(root: Path, name: str | None = None, glibc: str | None = None) -> Toolchain:
    """The toolchain of a checkout (`root/toolchain`)."""
    return select(load(root / "toolchain"), name, glibc)


def slim_name(tc: Toolchain) -> str:
    return f"{tc.name}-{tc.version}-linux-{'-'.join(sorted(tc.arches))}-slim.tar.xz"
