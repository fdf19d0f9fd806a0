"""The Python a wheel is built for: its interpreter, ABI tag and headers, and the one that runs the build."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass
from pathlib import Path

from hermetic.core import platforms
from hermetic.core.errors import UsageError
from hermetic.model import toolchains

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


def usable(interp: Interpreter, tc: toolchains.Toolchain) -> None:
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
