"""CMake and Ninja for LLVM builds: the hash-pinned wheels of the wheelhouse, never PATH's.

CMake writes bytes into the install tree (LLVMExports.cmake differs between CMake versions), so
the build uses exactly the CMake and Ninja that toolchain/build-requirements.txt pins. Their
wheels (verified by sha256 on every look, like the rest of the wheelhouse) carry plain
executables under `<name>/data/`; that directory is unpacked into the cache once and its bin/
goes first on the build's PATH. Before a build, each tool is asked for its version: a build
refuses to run with another one.

Conan is the other tool that writes bytes (the generated toolchain files, the package layout): it
is hermetic's own dependency, pinned in pyproject.toml, and the build runs the Conan of the Python
that runs hermetic, after checking that its version is the pinned one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core.digests import file_sha256
from hermetic.core.errors import EnvironmentError_, SourceError
from hermetic.core.log import null_log
from hermetic.core.staging import fill_lock, staged_dir, write_file
from hermetic.model.record import scan_tree, tree_digest
from hermetic.model.requirements import load_requirements, require_wheelhouse

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings

TOOLS = ("cmake", "ninja")  # the wheels whose executables a build runs
UNPACK_LAYOUT = 1  # bump when what is unpacked changes
_MARK = ".hermetic-unpacked.json"


@dataclass(frozen=True)
class Tool:
    name: str
    version: str  # as pinned
    wheel: str  # the wheel file it came from
    sha256: str  # that wheel's digest
    bin_dir: Path


@dataclass(frozen=True)
class BuildTools:
    tools: tuple[Tool, ...]

    def path(self, rest: str) -> str:
        """PATH with the pinned tools first."""
        return os.pathsep.join([*(str(t.bin_dir) for t in self.tools), rest])

    def identity(self) -> dict[str, str]:
        return {t.name: f"{t.version} sha256:{t.sha256}" for t in self.tools}

    def exe(self, name: str) -> Path:
        return next(t.bin_dir / name for t in self.tools if t.name == name)


def _machine_wheel(files: list[Path]) -> Path | None:
    """The wheel of this machine's architecture among the verified files of one requirement."""
    arch = platform.machine()
    for f in sorted(files):
        tag = f.name[:-4].split("-")[-1]
        if tag == "any" or arch in tag:
            return f
    return None


def _unpacked_digest(d: Path) -> str:
    return tree_digest(e for e in scan_tree(d) if e.path != _MARK)


def _unpacked(dest: Path, sha256: str) -> bool:
    try:
        mark = json.loads((dest / _MARK).read_text())
    except (OSError, ValueError):
        return False
    # Scanned again on every use (a fraction of a second): a tool changed in the cache is never run.
    return isinstance(mark, dict) and mark.get("sha256") == sha256 and mark.get("tree") == _unpacked_digest(dest)


def _target(rel: str, name: str, version: str) -> str | None:
    """Where a wheel entry goes in the unpacked tool: cmake's `cmake/data/…` (bin/ and the share/
    its modules live in), ninja's `ninja-<version>.data/scripts/ninja` (as bin/ninja); None: left out."""
    for prefix, dest in ((f"{name}/data/", ""), (f"{name}-{version}.data/scripts/", "bin/")):
        if rel.startswith(prefix) and not rel.startswith(f"{name}/data/doc/"):
            return dest + rel[len(prefix):]
    return None


def _unpack(wheel: Path, name: str, version: str, sha256: str, dest: Path, log: Log) -> None:
    with staged_dir(dest) as tmp:
        count = 0
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                rel = None if info.is_dir() else _target(info.filename, name, version)
                if not rel:
                    continue
                if rel.startswith("/") or ".." in rel.split("/"):
                    raise SourceError(f"{wheel.name} holds an unsafe path {info.filename!r}", "", f"remove {wheel}")
                with z.open(info) as src:
                    write_file(tmp, rel, src, bool((info.external_attr >> 16) & 0o111))
                count += 1
        if not (tmp / "bin" / name).is_file():
            raise SourceError(f"{wheel.name} holds no {name} executable", "not the wheel build-requirements.txt pins",
                              "check toolchain/build-requirements.txt")
        (tmp / _MARK).write_text(json.dumps({"sha256": sha256, "wheel": wheel.name, "tree": _unpacked_digest(tmp)}) + "\n")
    log(f"build tools: unpacked {count} files of {wheel.name}")


def ensure(settings: Settings, log: Log = null_log) -> BuildTools:
    """The pinned CMake and Ninja, unpacked from the verified wheelhouse into the cache."""
    reqs = load_requirements(settings.toolchain_dir / "build-requirements.txt")
    house = settings.wheelhouse_dir
    check = require_wheelhouse(house, reqs)
    tools: list[Tool] = []
    for name in TOOLS:
        req = reqs.get(name)
        if req is None:
            raise SourceError(f"toolchain/build-requirements.txt pins no {name}", "LLVM builds run the pinned one",
                              f"add {name}==VERSION with its --hash")
        wheel = _machine_wheel(check.found[req.name])
        if wheel is None:
            raise SourceError(
                f"the wheelhouse {house} holds no {name} {req.version} wheel for {platform.machine()}",
                "LLVM builds run the pinned CMake and Ninja from the wheelhouse, not PATH's",
                "run `hermetic fetch` (it fills the wheelhouse) or pass --wheelhouse DIR",
            )
        sha = file_sha256(wheel)  # one of the pinned hashes: require_wheelhouse checked it just now
        key = hashlib.sha256(json.dumps([sha, UNPACK_LAYOUT]).encode()).hexdigest()[:24]
        dest = settings.cache_dir / "buildtools" / f"{name}-{req.version}-{key}"
        if not _unpacked(dest, sha):
            with fill_lock(dest, log):  # another hermetic process may be unpacking it too
                if not _unpacked(dest, sha):
                    _unpack(wheel, name, req.version, sha, dest, log)
        tools.append(Tool(name, req.version, wheel.name, sha, dest / "bin"))
    return BuildTools(tuple(tools))


def check_versions(tools: BuildTools, env: dict[str, str]) -> dict[str, str]:
    """Ask each tool, as the build's PATH finds it, for its version; refuse any other than pinned."""
    found: dict[str, str] = {}
    for t in tools.tools:
        exe = shutil.which(t.name, path=env.get("PATH"))
        try:
            line = subprocess.run([exe or t.name, "--version"], capture_output=True, text=True, env=env,
                                  timeout=60).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            line = "not runnable"
        # ninja's wheel says `1.13.2.git.kitware.jobserver-pipe-1` for 1.13.2
        said = any(w == t.version or w.startswith(t.version + ".") for w in line.split())
        if exe is None or Path(exe).resolve() != (t.bin_dir / t.name).resolve() or not said:
            raise EnvironmentError_(
                f"the build would run {t.name} {exe or '(none)'} ({line}), not the pinned {t.name} {t.version}",
                f"builds use {t.bin_dir / t.name} from {t.wheel}",
                f"remove {t.bin_dir.parent} so that it is unpacked again from the verified wheel",
            )
        found[t.name] = line
    return found


def conan_pin() -> str:
    """The Conan version hermetic pins: from its installed metadata, else (run from a checkout's src/
    without installing) from that checkout's pyproject.toml."""
    try:
        reqs = importlib.metadata.requires("hermetic") or []
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
        reqs = tomllib.loads(pyproject.read_text())["project"]["dependencies"] if pyproject.is_file() else []
    for req in reqs:
        name, sep, version = req.partition("==")
        if sep and name.strip().lower() == "conan":
            return version.split(";")[0].strip()
    raise EnvironmentError_(
        "hermetic's requirements pin no Conan version (conan==X)",
        "builds refuse to run an unpinned Conan",
        "reinstall hermetic from its checkout: pip install -e .",
    )


def conan_command() -> list[str]:
    """The Conan the build runs (this Python's, never PATH's), checked to be the pinned version."""
    pin = conan_pin()
    try:
        have = importlib.metadata.version("conan")
    except importlib.metadata.PackageNotFoundError:
        have = "not installed"
    if have != pin:
        raise EnvironmentError_(
            f"the build would run Conan {have} ({sys.executable} -m conans.conan), not the pinned Conan {pin}",
            "Conan writes the generated toolchain files and the package layout: another version may change the tree",
            f"pip install conan=={pin}",
        )
    # This Python's import path, given to the Conan process itself: the build's environment is fixed
    # (no PYTHONPATH), and a PYTHONPATH would also reach every compile and configure below Conan.
    paths = list(dict.fromkeys(p for p in sys.path if p and Path(p).is_dir()))
    return [sys.executable, "-c", f"import sys; sys.path[:0] = {paths!r}; from conans.conan import run; run()"]


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def toolchain_versions(env: dict[str, str]) -> dict[str, str]:
    """What the build's own PATH finds (not this process's)."""
    def which(name: str) -> str:
        return shutil.which(name, path=env.get("PATH")) or name

    try:
        conan = _version([*conan_command(), "--version"])
    except EnvironmentError_ as err:  # a wheel's record says so; an LLVM build has refused before this
        conan = err.what
    return {
        "cc": _version([which(env.get("CC", "cc")), "--version"]),
        "cxx": _version([which(env.get("CXX", "c++")), "--version"]),
        "cmake": _version([which("cmake"), "--version"]),
        "ninja": _version([which("ninja"), "--version"]),
        "conan": conan,
        "python": platform.python_version(),
        "machine": f"{platform.system().lower()}-{platform.machine()}",
    }
