"""Offline, reproducible wheels of the compiler core, built against an LLVM prefix.

The lifecycle: a build venv (cached by the requirements digest and the
interpreter) is filled from the hash-pinned wheelhouse with `--no-index`; the
project is copied to a pinned place under the work dir; `pip wheel
--no-index --no-build-isolation` runs in the offline sandbox with a fixed
environment, a pinned scikit-build-core build dir, prefix maps and
toolchain/reproducible.cmake; the result is re-packed by our own code
(sorted entries, fixed timestamps and modes, RECORD regenerated last) and
tagged with the platform auditwheel vouches for.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import recipe, record, sandbox
from .digests import file_sha256
from .errors import BuildError, HermeticError, RecipeError, UsageError
from .llvm import iso_time
from .llvm import toolchain_versions as llvm_toolchain_versions
from .log import Log
from .settings import Settings
from .wheelfile import WheelName, _vkey, parse_auditwheel, platform_from_audit, repack, symbol_versions, verify_record
from .wheelhouse import Requirements, load_requirements, require_wheelhouse, wheelhouse_dir

WHEEL_RECORD_SCHEMA = record.WHEEL_RECORD_SCHEMA
# zip cannot store times before 1980; a wheel's entries get max(SOURCE_DATE_EPOCH, this).
ZIP_EPOCH_MIN = 315532800
_SKIP_IN_REPACK = ("RECORD", "RECORD.jws", "RECORD.p7s")


# --- the compiler recipe (data) ----------------------------------------------------------------


@dataclass(frozen=True)
class WheelRecipe:
    path: Path
    project: str
    requirements: str
    llvm_recipe: str
    cmake_defines: tuple[tuple[str, str], ...]
    exclude: tuple[str, ...]

    def digest(self) -> str:
        data = [self.project, self.requirements, self.llvm_recipe, self.cmake_defines, self.exclude]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()


def load_wheel_recipe(recipes_dir: Path) -> WheelRecipe:
    path = recipes_dir / "compiler" / "wheel.yml"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise RecipeError(f"no compiler recipe at {path}", "", "restore recipes/compiler/wheel.yml from git") from exc
    except yaml.YAMLError as exc:
        raise RecipeError(f"cannot read {path}", str(exc), "fix the YAML syntax") from exc
    keys = {"project", "requirements", "llvm_recipe", "cmake_defines", "exclude"}
    if not isinstance(data, dict) or set(data) - keys or not {"project", "requirements"} <= set(data):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise RecipeError(
            f"{path} is malformed", f"keys: {got}", f"use the keys {', '.join(sorted(keys))} (project, requirements required)"
        )
    defines = data.get("cmake_defines") or {}
    if not isinstance(defines, dict):
        raise RecipeError(f"{path}: cmake_defines must be a mapping", f"got {defines!r}", "write KEY: VALUE pairs")
    return WheelRecipe(
        path=path,
        project=str(data["project"]),
        requirements=str(data["requirements"]),
        llvm_recipe=str(data.get("llvm_recipe", "llvm")),
        cmake_defines=tuple(sorted((str(k), str(v)) for k, v in defines.items())),
        exclude=tuple(str(x) for x in data.get("exclude") or ()),
    )


# --- the LLVM prefix ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LLVMPrefix:
    prefix: Path
    cmake_dir: Path
    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


_LLVM_VERSION = re.compile(r'set\(\s*(?:LLVM_PACKAGE_VERSION|PACKAGE_VERSION)\s+"?([0-9]+(?:\.[0-9]+)*)"?\s*\)')


def inspect_llvm(prefix: Path, required_major: int) -> LLVMPrefix:
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
    found = LLVMPrefix(prefix, cmake_dir, version)
    if found.major != required_major:
        raise UsageError(
            f"{prefix} is LLVM {version}, the compiler core needs LLVM {required_major}",
            f"tilec is written against the LLVM {required_major} C++ API (find_package(LLVM {required_major} CONFIG))",
            f"pass an LLVM {required_major} prefix, e.g. one built by `hermetic build llvm` or /usr/lib/llvm-{required_major}",
        )
    return found


def find_llvm_record(prefix: Path, work_dir: Path) -> record.LLVMRecordRef | None:
    """The hermetic build record whose install tree holds this prefix, if there is one."""
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
            return record.LLVMRecordRef(str(path), rec.variant, rec.inputs_digest, rec.tree.digest)
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

    def venv_key(self, python: str) -> str:
        data = [self.requirements.digest(), os.path.realpath(python), sys.version]
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
    venv = settings.work_dir / "wheel" / "venv" / job.venv_key(sys.executable)
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
    sandbox.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], what="create the build venv",
                env=env, cwd=venv.parent, prefix=prefix, log_path=log_path, quiet=True)
    py = venv / "bin" / "python"
    sandbox.run(
        [str(py), f"{pip_files[0]}/pip", "install", "--no-index", "--find-links", str(job.wheelhouse),
         "--require-hashes", "-r", str(job.requirements.path), "--no-warn-script-location", "--no-cache-dir"],
        what="install the build requirements from the wheelhouse",
        env=env, cwd=venv.parent, prefix=prefix, log_path=log_path, quiet=True,
        fix=f"check the wheelhouse {job.wheelhouse} against {job.requirements.path} (`hermetic fetch` refills it)",
    )
    record.write_json(marker, {"requirements": job.requirements.digest(), "python": sys.version,
                               "executable": os.path.realpath(sys.executable)})
    return venv, False


def plan(settings: Settings, project: Path | None, llvm_prefix: Path, output: Path | None, wheelhouse: Path | None) -> WheelJob:
    """Resolve and validate everything a build needs, before anything runs."""
    wr = load_wheel_recipe(settings.recipes_dir)
    llvm_rec = recipe.load(settings.recipes_dir, wr.llvm_recipe)
    proj = (project or settings.root / wr.project).resolve()
    _project_name(proj)
    llvm = inspect_llvm(llvm_prefix.absolute(), int(llvm_rec.version.split(".")[0]))
    reqs = load_requirements(settings.root / wr.requirements)
    wh = (wheelhouse or wheelhouse_dir(settings)).resolve()
    require_wheelhouse(wh, reqs)
    toolchain_file = settings.toolchain_dir / "reproducible.cmake"
    if not toolchain_file.is_file():
        raise RecipeError(f"{toolchain_file} is missing", "it makes CMake builds reproducible", "restore it from git")
    return WheelJob(
        project=proj, llvm=llvm, output=(output or settings.work_dir / "wheels").absolute(), wheelhouse=wh,
        requirements=reqs, recipe=wr, epoch=llvm_rec.source_date_epoch, toolchain_file=toolchain_file,
    )


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
    name = _project_name(job.project)
    src = base / "src" / name
    build_dir = base / "build"
    stage = base / "dist"
    log_path = base / "build.log"
    _no_spaces(work=base, project=job.project)
    offline, prefix = sandbox.offline_policy(settings.offline)
    log(f"wheel: plan: {job.project} against LLVM {job.llvm.version} at {job.llvm.prefix}")
    log(f"wheel:   python {platform.python_version()} ({sys.executable}), SOURCE_DATE_EPOCH {job.epoch}")
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
    }
    defines = [("LLVM_DIR", str(job.llvm.cmake_dir)), ("CMAKE_TOOLCHAIN_FILE", str(job.toolchain_file)),
               *job.recipe.cmake_defines]
    argv = [
        str(venv / "bin" / "python"), "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps",
        "--no-cache-dir", "-v", "--wheel-dir", str(stage), f"--config-settings=build-dir={build_dir}",
        *(f"--config-settings=cmake.define.{k}={v}" for k, v in defines), str(src),
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
    auditwheel = venv / "bin" / "auditwheel"
    audit: dict[str, Any] | None = None
    tool = str(auditwheel) if auditwheel.is_file() else shutil.which("auditwheel")
    if tool:
        out = sandbox.run([tool, "show", "--json", str(raw)], what="check the platform tag with auditwheel",
                          env=env, cwd=base, prefix=prefix, log_path=log_path, quiet=True)
        audit = parse_auditwheel(out)
    tag = platform_from_audit(audit, current) if audit else current
    with tempfile.TemporaryDirectory(prefix="so-", dir=base) as tmp:
        needs: dict[str, str] = {}
        for so in _extract_binaries(raw, Path(tmp)):
            for lib, ver in symbol_versions(so).items():
                if lib not in needs or _vkey(ver) > _vkey(needs[lib]):
                    needs[lib] = ver
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
            source="auditwheel" if audit else "none: auditwheel not available",
            auditwheel=_audit_facts(audit) if audit else None,
            built_as=current,
        ),
        glibc_required=needs.get("GLIBC"),
        symbol_versions=tuple(sorted(needs.items())),
        python=record.PythonInfo(platform.python_version(), platform.python_implementation(), f"{wname.python}-{wname.abi}"),
        project=record.ProjectRef(name, str(job.project)),
        llvm=record.WheelLLVM(str(job.llvm.prefix), str(job.llvm.cmake_dir), job.llvm.version,
                              find_llvm_record(job.llvm.prefix, settings.work_dir)),
        source_date_epoch=job.epoch,
        build_requirements=record.BuildRequirements(
            str(job.requirements.path), job.requirements.digest(),
            tuple(record.PinnedRequirement(r.name, r.version, tuple(r.hashes)) for r in job.requirements.items),
        ),
        wheelhouse=str(job.wheelhouse),
        recipe_digest=job.recipe.digest(),
        offline=record.Offline(offline.enforced, offline.method, offline.reason),
        machine=f"{platform.system().lower()}-{platform.machine()}",
        toolchain=record.ToolchainVersions.from_mapping(llvm_toolchain_versions(env)),
        started=iso_time(wall_started),
        finished=iso_time(time.time()),
        timings_s=record.WheelTimings(
            venv=round(venv_s, 1), venv_reused=reused, build=round(build_s, 1),
            tag_and_repack=round(repack_s, 1), total=round(time.monotonic() - started, 1),
        ),
    )
    record.write_record(job.output / "wheel-record.json", rec)
    shutil.rmtree(stage, ignore_errors=True)
    log(f"wheel: {wheel} sha256 {digest} ({rec.timings_s.total:.0f}s)")
    return rec


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
