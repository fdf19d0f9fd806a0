"""The LLVM prefix a wheel links: its checks, its build record, and the toolchain and architecture they decide."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core import platforms
from hermetic.core.errors import HermeticError, UsageError
from hermetic.core.log import null_log
from hermetic.model import record, toolchains
from hermetic.model.wheels import DEFAULT_RECIPE

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings

HOST = toolchains.Toolchain(name="host", kind="host")  # the machine's compiler: what wheels were built with before zig


@dataclass(frozen=True)
class LLVMPrefix:
    prefix: Path
    cmake_dir: Path
    version: str
    targets: tuple[str, ...] = ()  # LLVM_TARGETS_TO_BUILD of its LLVMConfig.cmake (() when it names none)

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


_LLVM_TARGETS = re.compile(r"set\(\s*LLVM_TARGETS_TO_BUILD\s+([^)\s]+)\s*\)")
_LLVM_VERSION = re.compile(r'set\(\s*(?:LLVM_PACKAGE_VERSION|PACKAGE_VERSION)\s+"?([0-9]+(?:\.[0-9]+)*)"?\s*\)')


def inspect_llvm(prefix: Path, required_major: int, who: str = DEFAULT_RECIPE) -> LLVMPrefix:
    """The LLVM install at prefix, or a UsageError saying what is wrong with it."""
    if not prefix.is_dir():
        raise UsageError(
            f"LLVM prefix {prefix} does not exist",
            "--llvm must name an installed LLVM (the directory holding lib/cmake/llvm)",
            "build one with `hermetic build llvm`, unpack an image with `hermetic pull REF --unpack DIR`, "
            "or use Debian's llvm-19-dev (--llvm /usr/lib/llvm-19)",
        )
    for sub in ("lib/cmake/llvm", "lib64/cmake/llvm"):
        cmake_dir = prefix / sub
        if (cmake_dir / "LLVMConfig.cmake").is_file():
            break
    else:
        raise UsageError(
            f"{prefix} holds no LLVMConfig.cmake",
            f"looked in {prefix}/lib/cmake/llvm and {prefix}/lib64/cmake/llvm; the compiler core finds LLVM "
            "through its CMake package",
            "pass the install prefix itself (e.g. /usr/lib64/llvm-nvptx-19.1.7), of an LLVM built with its CMake "
            "exports (every hermetic variant has them; on Debian: apt-get install llvm-19-dev)",
        )
    version = ""
    for name in ("LLVMConfigVersion.cmake", "LLVMConfig.cmake"):
        f = cmake_dir / name
        if f.is_file():
            m = _LLVM_VERSION.search(f.read_text(errors="replace"))
            if m:
                version = m.group(1)
                break
    if not version:
        raise UsageError(f"cannot tell the LLVM version of {prefix}", f"no PACKAGE_VERSION in {cmake_dir}", "reinstall LLVM")
    m = _LLVM_TARGETS.search((cmake_dir / "LLVMConfig.cmake").read_text(errors="replace"))
    found = LLVMPrefix(prefix, cmake_dir, version, tuple(t for t in m.group(1).strip('"').split(";") if t) if m else ())
    if found.major != required_major:
        raise UsageError(
            f"{prefix} is LLVM {version}, the {'compiler core' if who == DEFAULT_RECIPE else who + ' wheel'} needs LLVM {required_major}",
            f"{'tilec' if who == DEFAULT_RECIPE else who} is written against the LLVM {required_major} C++ API",
            f"pass an LLVM {required_major} prefix, e.g. one built by `hermetic build llvm` or /usr/lib/llvm-{required_major}",
        )
    return found


def find_llvm_build(prefix: Path, work_dir: Path) -> tuple[Path, record.BuildRecord] | None:
    """The hermetic build record (its path and contents) whose install tree holds this prefix, if there is one."""
    target = prefix.resolve()
    candidates = [a / "record.json" for a in target.parents]
    llvm_dir = work_dir / "llvm"
    if llvm_dir.is_dir():
        candidates += sorted(llvm_dir.glob("*/record.json"))
    for path in candidates:
        if not path.is_file():
            continue
        try:
            rec = record.load_build_record(path)
        except HermeticError:
            continue  # a search: a record.json that is not a readable hermetic record is not the one
        if rec.install_dir.resolve() == target:
            return path, rec
    return None


def find_llvm_record(prefix: Path, work_dir: Path) -> record.LLVMRecordRef | None:
    """A reference to the hermetic build record whose install tree holds this prefix, if there is one."""
    found = find_llvm_build(prefix, work_dir)
    return record_ref(*found) if found else None


def record_ref(path: Path, rec: record.BuildRecord) -> record.LLVMRecordRef:
    return record.LLVMRecordRef(str(path), rec.variant, rec.inputs_digest, rec.tree.digest)


# --- the compiler: the LLVM tree's toolchain ----------------------------------------------------


def _compiler(ref: record.ToolchainRef) -> tuple[str, ...]:
    # What decides whether objects link together: the same compiler release (and so the same libc++ ABI)
    # for the same target. The unpack layout and the wrapper version change how hermetic calls that
    # compiler (flags such as -g0), not what its objects link against, so they may differ.
    return (ref.name, ref.kind, ref.version, ref.file, ref.sha256, ref.target)


def wheel_toolchain(
    settings: Settings, prefix: Path, built_with: record.ToolchainRef | None, warn: Log = null_log
) -> toolchains.Toolchain:
    """The toolchain a wheel linking the static LLVM at `prefix` is compiled with.

    The LLVM's record decides (`built_with`): an LLVM built with zig links zig's libc++, one built by the
    host's g++ links libstdc++, and one extension cannot hold both. `--toolchain`/`--glibc` may only say
    the same. Without a record (a distribution's LLVM, say) the host's compiler is used unless
    `--toolchain` names another, with a warning: whatever built such an LLVM, it was not our zig.
    """
    catalog = toolchains.load(settings.toolchain_dir)
    if built_with is None:
        arch = platforms.zig_arch(settings.arch) if settings.arch else None
        tc = toolchains.select(catalog, settings.toolchain or HOST.name, settings.glibc, arch)
        how = "selected" if settings.toolchain else "no record names a pinned toolchain"
        warn(
            f"wheel: warning: {prefix} has no hermetic build record, so nothing says which compiler built it; "
            f"compiling with {tc.label} ({how}). A static LLVM built by another toolchain will not link "
            "(zig's libc++ and the host's libstdc++ do not mix)."
        )
        return tc
    glibc_differs = bool(settings.glibc) and settings.glibc != (built_with.glibc or None)
    if (settings.toolchain and settings.toolchain != built_with.name) or glibc_differs:
        asked = f"--toolchain {settings.toolchain or built_with.name}" + (f" --glibc {settings.glibc}" if settings.glibc else "")
        raise UsageError(
            f"{asked} is not the toolchain the LLVM at {prefix} was built with",
            f"asked for {asked.removeprefix('--toolchain ')}; its record says {built_with.label}. The wheel links that "
            "static LLVM, so it must be compiled with the same toolchain and target "
            "(zig's libc++ and the host's libstdc++ do not mix)",
            "drop --toolchain/--glibc (HERMETIC_TOOLCHAIN/HERMETIC_GLIBC): the LLVM's record decides; or build an LLVM "
            f"with that toolchain first (`hermetic build llvm {asked}`)",
        )
    try:
        tc = toolchains.select_recorded(catalog, built_with.name, built_with.target, built_with.glibc)
    except UsageError as exc:
        raise UsageError(
            f"this checkout cannot select the toolchain the LLVM at {prefix} was built with ({built_with.label})",
            f"{exc.what}{': ' + exc.why if exc.why else ''}",
            "build the wheel from the checkout that built that LLVM, or rebuild LLVM with this checkout",
        ) from exc
    have = record.ToolchainRef.from_mapping(tc.identity())
    if _compiler(have) != _compiler(built_with):
        raise UsageError(
            f"the LLVM at {prefix} was built with another {built_with.name} than this checkout pins",
            f"its record says {built_with.label}; this checkout pins {have.label}",
            f"rebuild LLVM with this checkout (`hermetic build llvm --toolchain {tc.name}`), or build the wheel "
            "from the checkout that built that LLVM",
        )
    return tc



def same_arch(settings: Settings, prefix: Path, tc: toolchains.Toolchain, recorded: bool) -> None:
    """`--arch` (default: this machine's) must be the architecture the LLVM was built for."""
    built = toolchains.target_arch(tc)
    if settings.arch and settings.arch != built:
        said = f"its record says {tc.label}" if recorded else f"it is compiled with {tc.label}"
        raise UsageError(
            f"the LLVM at {prefix} is for {built}, the wheel for --arch {settings.arch}",
            f"the wheel links that static LLVM, so both are one architecture; {said}"
            + ("" if settings.arch != platforms.machine_arch() else f"; --arch defaults to this machine's ({settings.arch})"),
            f"pass --arch {built} (with an {built} --python) for that tree, or --llvm a tree built with "
            f"`hermetic build llvm --arch {settings.arch}`",
        )
