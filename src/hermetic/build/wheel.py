"""Offline, reproducible wheels of the compiler core, built against an LLVM prefix.

The lifecycle: a build venv (cached by the requirements digest and the
interpreter) is filled from the hash-pinned wheelhouse with `--no-index`; the
project is copied to a pinned place under the work dir; `pip wheel
--no-index --no-build-isolation` runs in the offline sandbox with a fixed
environment, a pinned scikit-build-core build dir, prefix maps and
toolchain/reproducible.cmake; the result is re-packed by our own code
(sorted entries, fixed timestamps and modes, RECORD regenerated last) and
tagged with the platform auditwheel vouches for.

The compiler is the LLVM tree's (its build record's `toolchain_id`): a static LLVM built with
zig links zig's libc++ and can only be linked by objects of the same zig. A zig build gets the
generated wrappers as CC/CXX/AR/RANLIB, its extension is checked to be self-contained (no shared
C++ runtime, nothing of it exported, glibc within the floor, no debug info) and the wheel is tagged
with the floor's manylinux tag by `auditwheel repair --plat`, which refuses what the policy does not
allow.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.build import sandbox, wrappers
from hermetic.build.buildenv import toolchain_versions as llvm_toolchain_versions
from hermetic.build.wheelfile import (
    WheelName,
    extension_problems,
    manylinux_platform,
    parse_auditwheel,
    platform_from_audit,
    repack,
    symbol_versions,
    verify_record,
    version_key,
)
from hermetic.core import platforms, times
from hermetic.core.digests import file_sha256
from hermetic.core.errors import (
    BuildError,
    EnvironmentError_,
    HermeticError,
    RecipeError,
    SubprocessFailed,
    UsageError,
)
from hermetic.core.log import null_log
from hermetic.fetch import sdist, toolchain
from hermetic.model import recipe, record, toolchains
from hermetic.model.requirements import load_requirements, require_wheelhouse, wheelhouse_dir
from hermetic.model.wheels import DEFAULT_RECIPE, SdistPin, WheelRecipe, load_wheel_recipe

if TYPE_CHECKING:
    from hermetic.core.log import Log
    from hermetic.fetch.sdist import CachedSdist
    from hermetic.model.requirements import Requirements
    from hermetic.model.settings import Settings

WHEEL_RECORD_SCHEMA = record.WHEEL_RECORD_SCHEMA
# zip cannot store times before 1980; a wheel's entries get max(SOURCE_DATE_EPOCH, this).
ZIP_EPOCH_MIN = 315532800
_SKIP_IN_REPACK = ("RECORD", "RECORD.jws", "RECORD.p7s")
HOST = toolchains.Toolchain(name="host", kind="host")  # the machine's compiler: what wheels were built with before zig


# --- the compiler recipe (data) ----------------------------------------------------------------


# How a project's build takes CMake cache entries: scikit-build-core's config settings, or (setuptools projects
# that run CMake themselves, like llvmlite) one environment variable of `-DKEY=VALUE` words.


# --- the LLVM prefix ---------------------------------------------------------------------------


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
    return _record_ref(*found) if found else None


def _record_ref(path: Path, rec: record.BuildRecord) -> record.LLVMRecordRef:
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
        tc = toolchains.select_recorded(catalog, built_with)
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


# --- the interpreter ----------------------------------------------------------------------------

# Debian's multiarch pyconfig.h includes the arch's own: `#include <x86_64-linux-gnu/python3.X/pyconfig.h>`.
MULTIARCH_INCLUDE = r"#\s*include\s*<([A-Za-z0-9_]+-linux-gnu[A-Za-z0-9_]*/python[^>/]+/pyconfig\.h)>"

_PROBE = r"""
import json, os, platform, re, sys, sysconfig
paths = sysconfig.get_paths()
inc = paths.get("include") or ""
cfg = os.path.join(paths.get("platinclude") or inc, "pyconfig.h")
try:
    text = open(cfg, encoding="utf-8", errors="replace").read()
except OSError:
    text = ""
print(json.dumps({
    "executable": os.path.realpath(sys.executable), "version": platform.python_version(), "build": sys.version,
    "implementation": platform.python_implementation(), "include": inc,
    "headers": os.path.isfile(os.path.join(inc, "Python.h")) and os.path.isfile(cfg),
    "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "multiarch": bool(re.search(@MULTIARCH@, text)),
    "machine": platform.machine(), "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or "",
}))
"""
_PROBE = _PROBE.replace("@MULTIARCH@", repr(MULTIARCH_INCLUDE))


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter a wheel can be built for (its build venv is made from it)."""

    executable: str  # the interpreter's own sys.executable, resolved
    version: str  # 3.12.1
    build: str  # sys.version: what the build venv is keyed by
    implementation: str  # CPython
    include: str
    headers: bool  # Python.h and pyconfig.h are there
    free_threaded: bool = False
    multiarch: bool = False  # Debian's pyconfig.h, which includes <x86_64-linux-gnu/python3.X/pyconfig.h>
    arch: str = ""  # the OCI architecture it runs on (amd64, arm64): the one its extensions are built for
    ext_suffix: str = ""  # sysconfig's EXT_SUFFIX: .cpython-311-aarch64-linux-gnu.so
    root: str = ""  # for an interpreter of another architecture: the root qemu-user runs it from (-L)

    @property
    def foreign(self) -> bool:
        """Whether it runs only under an emulator here: its extensions are cross-built."""
        return bool(self.root)

    @property
    def xy(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)

    def tag(self, py_api: str = "") -> str:
        """The python-abi tag scikit-build-core gives a wheel built with it for `wheel.py-api = py_api`."""
        if self.implementation != "CPython":
            return f"{self.implementation.lower()}: not supported (CPython only)"
        xy = "".join(str(x) for x in self.xy)
        m = re.fullmatch(r"cp(\d)(\d+)", py_api)
        if m and not self.free_threaded and self.xy >= (int(m.group(1)), int(m.group(2))):
            return f"{py_api}-abi3"  # the stable ABI of py_api, whichever newer interpreter builds it
        return f"cp{xy}-cp{xy}{'t' if self.free_threaded else ''}"


def current_interpreter() -> Interpreter:
    """The interpreter running hermetic: the default one."""
    paths = sysconfig.get_paths()
    inc = paths.get("include") or ""
    cfg = Path(paths.get("platinclude") or inc) / "pyconfig.h"
    text = cfg.read_text(errors="replace") if cfg.is_file() else ""
    return Interpreter(
        executable=os.path.realpath(sys.executable), version=platform.python_version(), build=sys.version,
        implementation=platform.python_implementation(), include=inc,
        headers=(Path(inc) / "Python.h").is_file() and cfg.is_file(),
        free_threaded=bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        multiarch=bool(re.search(MULTIARCH_INCLUDE, text)),
        arch=platforms.machine_arch(), ext_suffix=str(sysconfig.get_config_var("EXT_SUFFIX") or ""),
    )


def interpreter_runner(path: str) -> tuple[tuple[str, ...], Path | None]:
    """How to run the interpreter `path` here: directly, or (another architecture's) under qemu-user with the
    root it lives in; that root, or None."""
    plat = toolchains.binary_platform(Path(path))
    if plat is None or plat.oci == platforms.machine_arch():
        return (), None
    root = toolchains.program_root(Path(path), plat)
    if root is None:
        raise UsageError(
            f"{path} is an {plat.oci} program, and no {plat.oci} root holds it",
            f"this {platforms.machine_arch()} machine runs it under {plat.emulator[0]} -L ROOT, ROOT being the nearest "
            f"directory above it with the {plat.oci} loader {plat.loader}; there is none",
            f"pass the python3.X of a whole {plat.oci} root of Debian's packages (README, \"The arm64 wheel\": "
            "tests/debian_root.py makes one)",
        )
    return toolchains.emulator(plat.oci, root), root


def probe_interpreter(path: str) -> Interpreter | None:
    """What `path` is, asked of itself (under qemu-user when it is another architecture's); None when it does not
    run (a pyenv shim of an inactive version)."""
    runner, root = interpreter_runner(path)
    try:
        proc = subprocess.run([*runner, path, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120)
        data = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    machine = str(data.pop("machine", "")).lower()
    data["arch"] = next((p.oci for p in platforms.PLATFORMS.values() if machine in p.machines), machine)
    data["root"] = str(root) if root else ""
    if root is not None and not Path(data["include"]).is_dir():
        # qemu-user finds /usr/include/... in the root (-L); outside the emulator it is ROOT/usr/include/...
        data["include"] = str(root / str(data["include"]).lstrip("/"))
    return Interpreter(**{k: data[k] for k in Interpreter.__dataclass_fields__})


_PYTHON_NAME = re.compile(r"^python3(?:\.\d+)?$")


def find_interpreters(search_path: str) -> list[Interpreter]:
    """The current interpreter and every python3 / python3.X on `search_path` that runs, once each."""
    found: dict[str, Interpreter] = {}
    current = current_interpreter()
    found[current.executable] = current
    for d in search_path.split(os.pathsep):
        try:
            names = sorted(n for n in os.listdir(d or ".") if _PYTHON_NAME.match(n))
        except OSError:
            continue
        for n in names:
            p = os.path.join(d or ".", n)
            if not os.access(p, os.X_OK):
                continue
            try:
                got = probe_interpreter(p)
            except UsageError:
                continue  # another architecture's program without its root: not a candidate
            if got is not None and got.executable not in found:
                found[got.executable] = got
    return sorted(found.values(), key=lambda i: (i.xy, i.version, i.executable), reverse=True)


def resolve_interpreter(spec: str | None, search_path: str | None = None) -> Interpreter:
    """`--python`: a path to an interpreter, or a version (3.12) found as python3.12 on the search path."""
    if not spec:
        return current_interpreter()
    if re.fullmatch(r"\d+\.\d+", spec):
        path = shutil.which(f"python{spec}", path=search_path)
        if path is None and ".".join(str(x) for x in sys.version_info[:2]) == spec:
            return current_interpreter()
        if path is None:
            raise UsageError(
                f"no python{spec} on PATH", "--python VERSION looks for pythonVERSION on PATH",
                "pass the interpreter's path (--python /path/to/python3.X), or list what is there with `hermetic wheel --python`",
            )
    else:
        path = spec
    got = probe_interpreter(path)
    if got is None:
        raise UsageError(
            f"{path} is not a Python interpreter that runs here", f"`{path} -I -c …` failed",
            "list the interpreters hermetic can use with `hermetic wheel --python`",
        )
    return got


def build_interpreter(target: Interpreter, search_path: str | None = None) -> Interpreter:
    """The interpreter that runs the build (pip, scikit-build-core, CMake) of a wheel for `target`: `target`
    itself, or for another architecture's a CPython of this machine of the same X.Y (and ABI)."""
    if not target.foreign:
        return target
    xy = ".".join(str(x) for x in target.xy)
    current = current_interpreter()
    candidates = [current] if current.xy == target.xy else []
    if not candidates:
        path = shutil.which(f"python{xy}", path=search_path)
        got = probe_interpreter(path) if path else None
        candidates = [got] if got is not None else []
    fits = [c for c in candidates if not c.foreign and c.xy == target.xy and c.free_threaded == target.free_threaded]
    if not fits:
        raise UsageError(
            f"no Python {xy} of this {platforms.machine_arch()} machine to run the build of a wheel for {target.executable}",
            f"a wheel for {target.arch} is built by a Python {xy}{' (free-threaded)' if target.free_threaded else ''} "
            f"of this machine (pip, scikit-build-core, CMake) against {target.executable}'s headers; "
            f"hermetic runs on Python {current.version} and PATH has no python{xy}",
            f"run hermetic with Python {xy}, or put python{xy} on PATH",
        )
    return fits[0]


def project_py_api(project: Path) -> str:
    """The project's scikit-build-core `wheel.py-api` (cp312 for the stable ABI), or ''."""
    try:
        data = tomllib.loads((project / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return ""
    wheel_opts = data.get("tool", {}).get("scikit-build", {}).get("wheel", {})
    api = wheel_opts.get("py-api", "") if isinstance(wheel_opts, dict) else ""
    return api if isinstance(api, str) else ""


def _usable(interp: Interpreter, tc: toolchains.Toolchain) -> None:
    """Refuse an interpreter the build cannot compile against, before anything runs."""
    if interp.implementation != "CPython":
        raise UsageError(f"{interp.executable} is {interp.implementation}", "hermetic builds CPython wheels", "pass a CPython interpreter")
    if not interp.headers:
        raise UsageError(
            f"{interp.executable} (Python {interp.version}) has no development headers",
            f"no Python.h/pyconfig.h in {interp.include}; the extension is compiled against them",
            f"install them (Debian: apt-get install python{'.'.join(map(str, interp.xy))}-dev) or pick another "
            "interpreter (`hermetic wheel --python` lists them)",
        )
    want = toolchains.target_arch(tc)
    if interp.arch and interp.arch != want:
        raise UsageError(
            f"{interp.executable} is an {interp.arch} interpreter; this wheel is for {want} ({tc.label})",
            "the extension is compiled against the interpreter's headers and named by its EXT_SUFFIX, so both must be "
            "the target's",
            f"pass --python an {want} interpreter"
            + ("" if want == platforms.machine_arch() else
               f": on this {platforms.machine_arch()} machine, the python3.X of an {want} root of Debian's packages, "
               "run under qemu-user (README, \"The arm64 wheel\")"),
        )
    if interp.multiarch and tc.kind == "zig" and multiarch_pyconfig(interp, tc) is None:
        raise UsageError(
            f"{interp.executable}'s headers cannot be used with {tc.label}",
            "its pyconfig.h is Debian's multiarch one, which includes <TRIPLE/python3.X/pyconfig.h> from "
            f"/usr/include, and no such header for {tc.arch} is there; the pinned toolchain never searches the "
            "host's /usr/include",
            "use an interpreter with self-contained headers (pyenv, python.org, the manylinux images), "
            "see `hermetic wheel --python`",
        )


def multiarch_pyconfig(interp: Interpreter, tc: toolchains.Toolchain) -> tuple[str, Path] | None:
    """Debian's pyconfig.h only includes <x86_64-linux-gnu/python3.X/pyconfig.h>: that one header
    (its include name and its file), which a zig build gets through a directory holding it alone,
    never through the host's whole /usr/include."""
    stub = Path(interp.include) / "pyconfig.h"
    try:
        text = stub.read_text(errors="replace")
    except OSError:
        return None
    for name in re.findall(MULTIARCH_INCLUDE, text):
        real = stub.parent.parent / name
        if name.startswith(f"{tc.arch}-linux-gnu") and real.is_file():
            return name, real
    return None


# --- the build ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WheelJob:
    project: Path
    llvm: LLVMPrefix
    output: Path
    wheelhouse: Path
    requirements: Requirements
    recipe: WheelRecipe
    epoch: int
    toolchain_file: Path
    toolchain: toolchains.Toolchain = HOST
    python: Interpreter = field(default_factory=current_interpreter)  # the target: headers, EXT_SUFFIX, tag
    llvm_record: record.LLVMRecordRef | None = None  # the hermetic build record of the LLVM, when there is one
    build_python: Interpreter | None = None  # runs the build venv; None: `python` (not cross-built)
    sdist: CachedSdist | None = None  # the verified release source of a third-party recipe (project is its path)

    @property
    def runner(self) -> Interpreter:
        """The interpreter of the build venv: this machine's."""
        return self.build_python or self.python

    def venv_key(self, python: str) -> str:
        data = [self.requirements.digest(), os.path.realpath(python), self.runner.build]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


def _project_name(project: Path) -> str:
    import tomllib

    path = project / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"{project} is not a Python project", f"no {path}", "pass the directory holding pyproject.toml (src/compiler)") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"cannot read {path}", str(exc), "fix the TOML syntax") from exc
    name = data.get("project", {}).get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{path} has no [project] name", "", "add [project] name = ...")
    return _dist_name(name)


def _dist_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).lower()


def _no_spaces(**paths: Path) -> None:
    for what, p in paths.items():
        if any(c.isspace() for c in str(p)):
            raise UsageError(
                f"the {what} path {p} contains whitespace",
                "it goes into compiler flags (-ffile-prefix-map) that CMake splits on spaces",
                "choose a --work-dir without spaces",
            )


def ensure_venv(job: WheelJob, settings: Settings, env: dict[str, str], prefix: tuple[str, ...], log: Log, log_path: Path) -> tuple[Path, bool]:
    """The build venv for these requirements and this interpreter; returns (venv, reused)."""
    python = job.runner.executable
    venv = settings.work_dir / "wheel" / "venv" / job.venv_key(python)
    marker = venv / "hermetic-venv.json"
    if marker.is_file():
        try:
            if json.loads(marker.read_text()).get("requirements") == job.requirements.digest():
                return venv, True
        except (OSError, json.JSONDecodeError):
            pass
    check = require_wheelhouse(job.wheelhouse, job.requirements)
    pip_files = check.found.get("pip", [])
    if not pip_files:
        raise RecipeError(
            f"{job.requirements.path} does not pin pip",
            "the build venv is created without pip and bootstrapped from the pinned pip wheel",
            "add pip==VERSION --hash=sha256:… to the build requirements",
        )
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log(f"wheel: creating the build venv {venv}")
    sandbox.run([python, "-m", "venv", "--without-pip", str(venv)], what="create the build venv",
                env=env, cwd=venv.parent, prefix=prefix, log_path=log_path, quiet=True)
    py = venv / "bin" / "python"
    sandbox.run(
        [str(py), f"{pip_files[0]}/pip", "install", "--no-index", "--find-links", str(job.wheelhouse),
         "--require-hashes", "-r", str(job.requirements.path), "--no-warn-script-location", "--no-cache-dir"],
        what="install the build requirements from the wheelhouse",
        env=env, cwd=venv.parent, prefix=prefix, log_path=log_path, quiet=True,
        fix=f"check the wheelhouse {job.wheelhouse} against {job.requirements.path} (`hermetic fetch` refills it)",
    )
    record.write_json(marker, {"requirements": job.requirements.digest(), "python": job.runner.build,
                               "executable": python})
    return venv, False


def plan(
    settings: Settings,
    project: Path | None,
    llvm_prefix: Path,
    output: Path | None,
    wheelhouse: Path | None,
    *,
    python: Interpreter | None = None,
    warn: Log = null_log,
    search_path: str | None = None,
    recipe_name: str = DEFAULT_RECIPE,
    log: Log = null_log,
) -> WheelJob:
    """Resolve and validate everything a build needs, before anything runs.

    `recipe_name` names recipes/NAME/wheel.yml: the compiler core (a directory of the checkout; `project`
    overrides it) or another project's sdist, fetched into the verified cache here (mirrors, then its URL).
    The toolchain comes from the LLVM's build record (see wheel_toolchain), and so does the architecture
    (`settings.arch` must say the same); `python` is the interpreter the wheel is for (default: the one
    running hermetic). For another architecture's interpreter (run under qemu-user from its root) the
    build venv is made from a Python of this machine of the same X.Y (found on `search_path`), and the
    extension is cross-compiled against the target's headers.
    """
    wr = load_wheel_recipe(settings.recipes_dir, recipe_name)
    cached_sdist = None
    if wr.sdist is not None:
        if project is not None:
            raise UsageError(
                f"the {wr.name} recipe builds its pinned sdist ({wr.sdist.file}), not {project}",
                "a third-party recipe's source is its release archive, verified by sha256",
                f"drop PROJECT; to build other sources, put their sdist in a --mirror directory under the name "
                f"{wr.sdist.file} (it is refused unless it matches the pin)",
            )
    else:
        proj = (project or settings.root / wr.project).resolve()
        _project_name(proj)
    llvm_rec = recipe.load(settings.recipes_dir, wr.llvm_recipe, _llvm_release(settings, wr))
    llvm = inspect_llvm(llvm_prefix.absolute(), int(llvm_rec.version.split(".")[0]), wr.name)
    found = find_llvm_build(llvm.prefix, settings.work_dir)
    tc = wheel_toolchain(settings, llvm.prefix, found[1].toolchain_ref if found else None, warn)
    _same_arch(settings, llvm.prefix, tc, found is not None)
    arch = toolchains.target_arch(tc)
    host = wr.missing_host_target(arch, llvm.targets)
    if host:
        raise UsageError(
            f"the LLVM at {llvm.prefix} has no {host} target, which the {wr.name} wheel for {arch} needs",
            f"{wr.name} compiles for the machine it runs on; that LLVM was built for {', '.join(llvm.targets)}",
            f"build a variant holding {host} (`hermetic variants` lists them; {', '.join(wr.variants) or 'any'} for {wr.name}) "
            "and pass its tree with --llvm",
        )
    if wr.sdist is not None:  # fetched once the LLVM is known to fit: a refusal downloads nothing
        cached_sdist = sdist_fetch(settings, wr.sdist, log)
        proj = cached_sdist.path
    interp = python or current_interpreter()
    _usable(interp, tc)
    runner = build_interpreter(interp, search_path)
    reqs = load_requirements(settings.root / wr.requirements)
    wh = (wheelhouse or wheelhouse_dir(settings)).resolve()
    require_wheelhouse(wh, reqs)
    toolchain_file = settings.toolchain_dir / "reproducible.cmake"
    if not toolchain_file.is_file():
        raise RecipeError(f"{toolchain_file} is missing", "it makes CMake builds reproducible", "restore it from git")
    return WheelJob(
        project=proj, llvm=llvm, output=(output or settings.work_dir / "wheels").absolute(), wheelhouse=wh,
        requirements=reqs, recipe=wr, epoch=wr.source_date_epoch or llvm_rec.source_date_epoch,
        toolchain_file=toolchain_file, toolchain=tc, python=interp, llvm_record=_record_ref(*found) if found else None,
        build_python=runner if runner is not interp else None, sdist=cached_sdist,
    )


def _llvm_release(settings: Settings, wr: WheelRecipe) -> str | None:
    """The LLVM release the recipe is built against: --llvm-version where given (and one it names), else its own."""
    if settings.llvm_version and wr.llvm_versions and settings.llvm_version not in wr.llvm_versions:
        raise UsageError(
            f"the {wr.name} wheel does not build against LLVM {settings.llvm_version}",
            f"{wr.path} names LLVM {', '.join(wr.llvm_versions)}",
            f"pass --llvm-version {wr.llvm_versions[0]} (or leave it out) with an LLVM tree of that release",
        )
    return settings.llvm_version or (wr.llvm_versions[0] if wr.llvm_versions else None)


def sdist_fetch(settings: Settings, pin: SdistPin, log: Log) -> CachedSdist:
    return sdist.fetch(settings.cache_dir, pin, settings.mirrors, settings.use_urls, log)


def _same_arch(settings: Settings, prefix: Path, tc: toolchains.Toolchain, recorded: bool) -> None:
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


def _version_script(patterns: tuple[str, ...], dest: Path) -> Path | None:
    """A linker version script exporting `patterns` (a recipe's zig_link.exports) and nothing else; None for none."""
    if not patterns:
        return None
    dest.write_text("/* Generated by hermetic from the wheel recipe's zig_link.exports: do not edit. */\n{\n  global: "
                    + " ".join(f"{p};" for p in patterns) + "\n  local: *;\n};\n")
    return dest


def _zig_toolchain_file(job: WheelJob, tools_cmake: Path, dest: Path, pyconfig: Path | None = None,
                        exports: Path | None = None) -> Path:
    """The CMake toolchain of a zig build: reproducible.cmake, zig's archiver, and debug info stripped at link;
    for another architecture's interpreter, CMake's cross-compiling system and processor too."""
    plat = platforms.PLATFORMS[toolchains.target_arch(job.toolchain)]
    cross = [
        "# A cross build: the wheel's interpreter is another architecture's (run under qemu-user).",
        "set(CMAKE_SYSTEM_NAME Linux)",
        f"set(CMAKE_SYSTEM_PROCESSOR {plat.machines[0]})",
    ] if job.python.foreign else []
    dest.write_text("\n".join([
        f"# Generated by hermetic for a wheel built with {job.toolchain.label}: do not edit.",
        f'include("{job.toolchain_file}")',
        f'include("{tools_cmake}")',
        "# zig links its cached libc++/libc++abi/libunwind objects, which carry debug info naming the paths",
        "# they were built in (reports/toolchain-prototype.md, problem 5): strip it on every link.",
        "foreach(kind EXE SHARED MODULE)",
        '  string(APPEND CMAKE_${kind}_LINKER_FLAGS_INIT " -Wl,--strip-debug")',
        "endforeach()",
        *([f"# The recipe's zig_link.exports: what the flags zig refuses ({' '.join(job.recipe.zig_link.drop)}) kept hidden.",
           f'string(APPEND CMAKE_SHARED_LINKER_FLAGS_INIT " -Wl,--version-script={exports}")'] if exports else []),
        *cross,
        *([f'string(APPEND CMAKE_C_FLAGS_INIT " -isystem {pyconfig}")',
           f'string(APPEND CMAKE_CXX_FLAGS_INIT " -isystem {pyconfig}")'] if pyconfig else []),
        "",
    ]))
    return dest


def cross_settings(target: Interpreter) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """What makes scikit-build-core, run by this machine's Python, build for another architecture's `target`:
    environment (the wheel's platform and the extension's suffix) and CMake cache entries (its headers)."""
    if not target.foreign:
        return {}, []
    plat = platforms.PLATFORMS[target.arch]
    env = {
        "_PYTHON_HOST_PLATFORM": f"linux-{plat.machines[0]}",  # the wheel's platform tag: linux_aarch64
        "SETUPTOOLS_EXT_SUFFIX": target.ext_suffix,  # SKBUILD_SOABI, so nanobind names the module for the target
    }
    defines = [(f"{p}_INCLUDE_DIR", target.include) for p in ("Python", "Python3", "PYTHON")]
    return env, defines


def _cross_env(job: WheelJob) -> dict[str, str]:
    return cross_settings(job.python)[0]


def _cross_defines(job: WheelJob) -> list[tuple[str, str]]:
    return cross_settings(job.python)[1]


def _extract_binaries(wheel: Path, dest: Path) -> list[Path]:
    out: list[Path] = []
    with zipfile.ZipFile(wheel) as z:
        for n in sorted(z.namelist()):
            base = n.rsplit("/", 1)[-1]
            if base.endswith(".so") or ".so." in base:
                target = dest / base
                target.write_bytes(z.read(n))
                out.append(target)
    return out


def build_wheel(settings: Settings, job: WheelJob, log: Log) -> record.WheelRecord:
    """Build, re-pack, tag and record the wheel; returns the record (also written as wheel-record.json)."""
    started = time.monotonic()
    wall_started = time.time()
    base = settings.work_dir / "wheel"
    name = _dist_name(job.recipe.sdist.name) if job.recipe.sdist else _project_name(job.project)
    src = base / "src" / name
    build_dir = base / "build"
    stage = base / "dist"
    log_path = base / "build.log"
    _no_spaces(work=base, project=job.project)
    offline, prefix = sandbox.offline_policy(settings.offline)
    tc = job.toolchain
    what = f"{job.sdist.pin.file} (sha256 {job.sdist.pin.sha256[:12]}…, {job.sdist.origin})" if job.sdist else str(job.project)
    log(f"wheel: plan: {what} against LLVM {job.llvm.version} at {job.llvm.prefix} (recipe {job.recipe.name})")
    log(f"wheel:   toolchain {tc.label}" + (" (the LLVM's, from its record)" if job.llvm_record else ""))
    log(f"wheel:   python {job.python.version} ({job.python.executable}), SOURCE_DATE_EPOCH {job.epoch}")
    if job.build_python is not None:
        log(f"wheel:   cross-built for {job.python.arch} ({job.python.executable} under qemu-user, root {job.python.root}); "
            f"build venv from {job.runner.executable} ({job.runner.version}, {job.runner.arch})")
    log(f"wheel:   wheelhouse {job.wheelhouse} ({len(job.requirements.items)} pinned requirements)")
    log(f"wheel:   offline: {offline.reason}")

    base.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    base_env = sandbox.build_env(job.epoch, {
        "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
    })
    t0 = time.monotonic()
    venv, reused = ensure_venv(job, settings, base_env, prefix, log, log_path)
    venv_s = time.monotonic() - t0
    log(f"wheel: build venv {'reused' if reused else 'created'}: {venv}")

    for d in (src, build_dir, stage):
        shutil.rmtree(d, ignore_errors=True)
    src.parent.mkdir(parents=True, exist_ok=True)
    if job.sdist is not None:
        sdist.unpack(job.sdist, src)
    else:
        shutil.copytree(job.project, src, ignore=shutil.ignore_patterns(*job.recipe.exclude), symlinks=True)
    stage.mkdir()

    maps = " ".join(
        f"-ffile-prefix-map={p}=/hermetic/{n}" for p, n in ((src, f"src/{name}"), (build_dir, "build"), (venv, "venv"))
    )
    env = base_env | {
        "PATH": f"{venv / 'bin'}{os.pathsep}{base_env['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "HERMETIC_PREFIX_MAPS": maps,
        "CMAKE_BUILD_PARALLEL_LEVEL": str(settings.jobs),
        "NINJA_STATUS": "[%f/%t] ",
    } | dict(job.recipe.env) | _cross_env(job)
    cmake_toolchain = job.toolchain_file
    if tc.kind == "zig":
        # The same wrappers, caches and archiver as the LLVM build (llvm.py), generated under this job's work dir.
        zig_root = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log)
        tc_dir = base / "toolchain"
        shutil.rmtree(tc_dir, ignore_errors=True)
        prepared = wrappers.prepare(tc, zig_root, tc_dir, settings.toolchain_dir, settings.work_dir / "zig-cache",
                                     drop_flags=job.recipe.zig_link.drop)
        bin_dir = Path(prepared.env["CC"]).parent
        env |= prepared.env | {"AR": str(bin_dir / "ar"), "RANLIB": str(bin_dir / "ranlib")}
        shim = None
        found = multiarch_pyconfig(job.python, tc) if job.python.multiarch else None
        if found is not None:
            shim = tc_dir / "pyconfig"
            (shim / found[0]).parent.mkdir(parents=True)
            shutil.copyfile(found[1], shim / found[0])
            log(f"wheel:   Debian's multiarch pyconfig.h: {found[1]} alone, through {shim}")
        exports = _version_script(job.recipe.zig_link.exports, tc_dir / "exports.map")
        cmake_toolchain = _zig_toolchain_file(job, tc_dir / "zig-tools.cmake", tc_dir / "wheel-toolchain.cmake", shim, exports)
        if job.recipe.cmake_args == "CMAKE_ARGS":
            # setuptools compiles a project's own C extensions with CC and the interpreter's CFLAGS: the same
            # prefix maps, and Debian's multiarch pyconfig.h through the shim, as CMake gets them
            env["CFLAGS"] = " ".join([maps, *([f"-isystem {shim}"] if shim else [])])
    defines = [("LLVM_DIR", str(job.llvm.cmake_dir)), ("CMAKE_TOOLCHAIN_FILE", str(cmake_toolchain)),
               *_cross_defines(job), *job.recipe.cmake_defines]
    settings_args = [f"--config-settings=build-dir={build_dir}"]
    if job.recipe.cmake_args == "CMAKE_ARGS":
        # the project splits it on spaces (paths have none: _no_spaces)
        env["CMAKE_ARGS"] = " ".join(f"-D{k}={v}" for k, v in defines)
        settings_args = []
    else:
        settings_args += [f"--config-settings=cmake.define.{k}={v}" for k, v in defines]
    argv = [
        str(venv / "bin" / "python"), "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps",
        "--no-cache-dir", "-v", "--wheel-dir", str(stage), *settings_args, str(src),
    ]
    log(f"wheel: building {name} with {settings.jobs} jobs (log: {log_path})")
    t0 = time.monotonic()
    sandbox.run(argv, what=f"build the {name} wheel", env=env, cwd=base, prefix=prefix, log_path=log_path,
                quiet=settings.quiet, label=f"wheel {name}")
    build_s = time.monotonic() - t0
    built = sorted(stage.glob("*.whl"))
    if len(built) != 1:
        raise BuildError(f"pip wheel produced {len(built)} wheels", f"in {stage}: {[p.name for p in built]}", f"see {log_path}")
    raw = built[0]

    t0 = time.monotonic()
    current = WheelName.parse(raw.name).platform
    with tempfile.TemporaryDirectory(prefix="so-", dir=base) as tmp:
        needs: dict[str, str] = {}
        for so in _extract_binaries(raw, Path(tmp)):
            for lib, ver in symbol_versions(so).items():
                if lib not in needs or version_key(ver) > version_key(needs[lib]):
                    needs[lib] = ver
            if tc.kind == "zig":
                problems = extension_problems(so, tc.glibc)
                if problems:
                    raise BuildError(
                        f"{so.name} built with {tc.label} is not a self-contained extension for glibc >= {tc.glibc}",
                        "; ".join(problems),
                        "link the C++ runtime statically with hidden visibility (-fvisibility=hidden, "
                        "-Wl,--exclude-libs,ALL, a version script exporting only PyInit_*), as src/compiler/CMakeLists.txt "
                        f"does; the build log is {log_path}",
                    )
    auditwheel = venv / "bin" / "auditwheel"
    audit: dict[str, Any] | None = None
    tool = str(auditwheel) if auditwheel.is_file() else shutil.which("auditwheel")
    if tool:
        out = sandbox.run([tool, "show", "--json", str(raw)], what="check the platform tag with auditwheel",
                          env=env, cwd=base, prefix=prefix, log_path=log_path, quiet=True)
        audit = parse_auditwheel(out)
    source = "auditwheel" if audit else "none: auditwheel not available"
    if tc.kind == "zig":
        # The tag is the toolchain's glibc floor, as far as auditwheel's policy for it accepts the wheel.
        want = manylinux_platform(tc.glibc, tc.arch)
        runner = _foreign_auditwheel(job, venv) if job.python.foreign else None
        raw = _auditwheel_repair(tool, raw, want, base / "repaired", env, prefix, log_path, runner)
        source = f"auditwheel repair --plat {want}"
        wheel = repack(raw, job.output, job.epoch)
    else:
        tag = platform_from_audit(audit, current) if audit else current
        wheel = repack(raw, job.output, job.epoch, tag if tag != current else None)
    problems = verify_record(wheel)
    if problems:
        raise BuildError(f"the re-packed {wheel.name} is inconsistent", "; ".join(problems[:5]), "report this as a hermetic bug")
    repack_s = time.monotonic() - t0
    digest = file_sha256(wheel)
    wname = WheelName.parse(wheel.name)
    rec = record.WheelRecord(
        wheel=wheel.name,
        sha256=digest,
        size=wheel.stat().st_size,
        tag=wname.tag,
        platform_tag=record.PlatformTag(
            tag=wname.platform,
            source=source,
            auditwheel=_audit_facts(audit) if audit else None,
            built_as=current,
        ),
        glibc_required=needs.get("GLIBC"),
        symbol_versions=tuple(sorted(needs.items())),
        python=record.PythonInfo(job.python.version, job.python.implementation, f"{wname.python}-{wname.abi}",
                                 job.python.executable,
                                 *((job.python.arch, job.runner.executable) if job.build_python else (None, None))),
        project=record.ProjectRef(
            name, str(job.project), job.recipe.name,
            record.SdistRef(**job.sdist.pin.as_json(), origin=job.sdist.origin) if job.sdist else None,
        ),
        llvm=record.WheelLLVM(str(job.llvm.prefix), str(job.llvm.cmake_dir), job.llvm.version, job.llvm_record),
        source_date_epoch=job.epoch,
        build_requirements=record.BuildRequirements(
            str(job.requirements.path), job.requirements.digest(),
            tuple(record.PinnedRequirement(r.name, r.version, tuple(r.hashes)) for r in job.requirements.items),
        ),
        wheelhouse=str(job.wheelhouse),
        recipe_digest=job.recipe.digest(),
        offline=record.Offline(offline.enforced, offline.method, offline.reason),
        machine=f"{platform.system().lower()}-{platform.machine()}",
        toolchain=record.ToolchainVersions.from_mapping(llvm_toolchain_versions(env) | {"python": job.python.version}),
        toolchain_id=record.ToolchainRef.from_mapping(tc.identity()),
        started=times.iso(wall_started),
        finished=times.iso(time.time()),
        timings_s=record.WheelTimings(
            venv=round(venv_s, 1), venv_reused=reused, build=round(build_s, 1),
            tag_and_repack=round(repack_s, 1), total=round(time.monotonic() - started, 1),
        ),
    )
    record.write_record(job.output / "wheel-record.json", rec)
    shutil.rmtree(stage, ignore_errors=True)
    shutil.rmtree(base / "repaired", ignore_errors=True)
    log(f"wheel: {wheel} sha256 {digest} ({rec.timings_s.total:.0f}s)")
    return rec


# auditwheel as a program, from the build venv's site-packages, run by another interpreter.
_AUDITWHEEL_MAIN = "import sys; sys.path[:0] = [{site!r}]; sys.argv[0] = 'auditwheel'; from auditwheel.main import main; sys.exit(main())"


def _foreign_auditwheel(job: WheelJob, venv: Path) -> tuple[str, ...]:
    """The build venv's auditwheel run by the wheel's own interpreter under qemu-user.

    `auditwheel repair` offers the policies of the machine it runs on (platform.machine()), so a wheel of
    another architecture is tagged by the same pinned auditwheel as it runs there: the target's Python under
    qemu-user, which says aarch64. auditwheel and its dependencies are pure Python.
    """
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if len(sites) != 1 or not (sites[0] / "auditwheel").is_dir():
        raise EnvironmentError_(
            f"the build venv {venv} has no auditwheel package to tag the {job.python.arch} wheel with",
            "a cross-built wheel gets its manylinux tag from the pinned auditwheel, run under qemu-user",
            "keep auditwheel in toolchain/build-requirements.txt and remove the venv so that it is made again",
        )
    runner, _ = interpreter_runner(job.python.executable)
    return (*runner, job.python.executable, "-I", "-B", "-c", _AUDITWHEEL_MAIN.format(site=str(sites[0])))


def _auditwheel_repair(
    tool: str | None, raw: Path, plat: str, dest: Path, env: Mapping[str, str], prefix: tuple[str, ...], log_path: Path,
    runner: tuple[str, ...] | None = None,
) -> Path:
    """The wheel as `auditwheel repair --plat PLAT` writes it: accepted for that policy, or a BuildError.

    --only-plat: exactly the toolchain's floor, not a newer tag auditwheel might also allow; --patcher none:
    a self-contained extension needs no grafted library, so nothing may be patched (that would fail).
    `runner` runs auditwheel instead of `tool` (another architecture's wheel: see _foreign_auditwheel).
    """
    if runner is not None:
        tool = shlex.join(runner)
    if tool is None:
        raise EnvironmentError_(
            "auditwheel is not available to vouch for the platform tag",
            "a wheel built with a pinned glibc floor gets its manylinux tag only where auditwheel's policy accepts it",
            "keep auditwheel in toolchain/build-requirements.txt (the build venv installs it)",
        )
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    try:
        argv = [*(runner or (tool,)), "repair", "--plat", plat, "--only-plat", "--patcher", "none", "-w", str(dest), str(raw)]
        sandbox.run(argv,
                    what=f"tag the wheel {plat} with auditwheel repair", env=env, cwd=dest.parent, prefix=prefix,
                    log_path=log_path, quiet=True)
    except SubprocessFailed as exc:
        said = [line.strip() for line in exc.output_tail.splitlines() if line.strip()]
        raise BuildError(
            f"auditwheel does not accept {raw.name} as {plat}",
            " ".join(said[-3:]) or exc.why,
            f"`{tool} show {raw}` says what it needs (a newer glibc, or a library outside the {plat} policy); "
            f"repro: {exc.repro}",
        ) from exc
    out = sorted(dest.glob("*.whl"))
    # auditwheel names a policy with its aliases (manylinux2014_x86_64.manylinux_2_17_x86_64): one of them must be plat
    if len(out) != 1 or plat not in WheelName.parse(out[0].name).platform.split("."):
        raise BuildError(f"auditwheel repair --plat {plat} wrote {[p.name for p in out]}", "expected one wheel of that tag",
                         f"see {log_path}")
    return out[0]


def _audit_facts(audit: Mapping[str, Any]) -> record.Auditwheel:
    """The parts of auditwheel's report the record keeps."""

    def text(value: object) -> str | None:
        return None if value is None else str(value)

    libs = audit.get("external_libs")
    return record.Auditwheel(
        overall_tag=text(audit.get("overall_tag")),
        sym_tag=text(audit.get("sym_tag")),
        external_libs=tuple(sorted((str(k), text(v)) for k, v in libs.items())) if isinstance(libs, dict) else None,
    )
