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
import shutil
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.build.buildenv import toolchain_versions as llvm_toolchain_versions
from hermetic.build.env import BuildEnv, compiler_for, prepare
from hermetic.build.interpreter import (
    Interpreter,
    build_interpreter,
    cross_settings,
    current_interpreter,
    find_interpreters,
    interpreter_runner,
    multiarch_pyconfig,
    probe_interpreter,
    project_py_api,
    resolve_interpreter,
    usable,
)
from hermetic.build.llvm_prefix import (
    HOST,
    LLVMPrefix,
    find_llvm_build,
    inspect_llvm,
    record_ref,
    same_arch,
    wheel_toolchain,
)
from hermetic.build.wheel_tag import audit_facts, auditwheel_repair, extract_binaries, foreign_auditwheel
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
from hermetic.core.errors import BuildError, RecipeError, UsageError
from hermetic.core.log import null_log
from hermetic.fetch import sdist, toolchain
from hermetic.model import recipe, record, toolchains
from hermetic.model.requirements import load_requirements, require_wheelhouse
from hermetic.model.wheels import DEFAULT_RECIPE, SdistPin, WheelRecipe, load_wheel_recipe

if TYPE_CHECKING:
    from hermetic.build import sandbox
    from hermetic.core.log import Log
    from hermetic.fetch.sdist import CachedSdist
    from hermetic.model.requirements import Requirements
    from hermetic.model.settings import Settings

# The interpreter's functions that the commands and verify call through this module (the job's face).
__all__ = [
    "Interpreter", "WheelJob", "build_wheel", "current_interpreter", "find_interpreters", "plan", "probe_interpreter",
    "project_py_api", "resolve_interpreter", "sdist_fetch",
]


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


def ensure_venv(job: WheelJob, settings: Settings, benv: BuildEnv, log: Log, log_path: Path) -> tuple[Path, bool]:
    """The build venv for these requirements and this interpreter, made in the sandbox without the compiler's
    variables; returns (venv, reused)."""
    python = job.runner.executable
    venv = _venv_dir(job, settings)
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
    benv.run([python, "-m", "venv", "--without-pip", str(venv)], what="create the build venv", env=benv.base,
             cwd=venv.parent, log_path=log_path)
    py = venv / "bin" / "python"
    benv.run(
        [str(py), f"{pip_files[0]}/pip", "install", "--no-index", "--find-links", str(job.wheelhouse),
         "--require-hashes", "-r", str(job.requirements.path), "--no-warn-script-location", "--no-cache-dir"],
        what="install the build requirements from the wheelhouse",
        env=benv.base, cwd=venv.parent, log_path=log_path,
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
    same_arch(settings, llvm.prefix, tc, found is not None)
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
    usable(interp, tc)
    runner = build_interpreter(interp, search_path)
    reqs = load_requirements(settings.root / wr.requirements)
    wh = (wheelhouse or settings.wheelhouse_dir).resolve()
    require_wheelhouse(wh, reqs)
    toolchain_file = settings.toolchain_dir / "reproducible.cmake"
    if not toolchain_file.is_file():
        raise RecipeError(f"{toolchain_file} is missing", "it makes CMake builds reproducible", "restore it from git")
    return WheelJob(
        project=proj, llvm=llvm, output=(output or settings.work_dir / "wheels").absolute(), wheelhouse=wh,
        requirements=reqs, recipe=wr, epoch=wr.source_date_epoch or llvm_rec.source_date_epoch,
        toolchain_file=toolchain_file, toolchain=tc, python=interp, llvm_record=record_ref(*found) if found else None,
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


def _cross_env(job: WheelJob) -> dict[str, str]:
    return cross_settings(job.python)[0]


def _cross_defines(job: WheelJob) -> list[tuple[str, str]]:
    return cross_settings(job.python)[1]


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
    tc = job.toolchain
    # The same wrappers, caches and archiver as the LLVM build (llvm.py), generated under this job's work dir.
    zig_root = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log) if tc.kind == "zig" else None
    compiler = compiler_for(settings, tc, zig_root, base / "toolchain", drop_flags=job.recipe.zig_link.drop)
    benv = prepare(compiler, epoch=job.epoch, offline=settings.offline, job_env={
        "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
    }, work=base, log=log, maps=((src, f"src/{name}"), (build_dir, "build"), (_venv_dir(job, settings), "venv")))
    _announce(job, benv.offline, log)

    base.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    t0 = time.monotonic()
    venv, reused = ensure_venv(job, settings, benv, log, log_path)
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

    benv.env = benv.layered({
        "PATH": f"{venv / 'bin'}{os.pathsep}{benv.base['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(settings.jobs),
        "NINJA_STATUS": "[%f/%t] ",
    } | dict(job.recipe.env) | _cross_env(job))
    cmake_toolchain = _zig_files(job, benv, compiler.out, log) if tc.kind == "zig" else job.toolchain_file
    argv = _pip_wheel(job, benv, venv, src, build_dir, stage, cmake_toolchain)
    log(f"wheel: building {name} with {settings.jobs} jobs (log: {log_path})")
    t0 = time.monotonic()
    benv.run(argv, what=f"build the {name} wheel", cwd=base, log_path=log_path, quiet=settings.quiet, label=f"wheel {name}")
    build_s = time.monotonic() - t0
    built = sorted(stage.glob("*.whl"))
    if len(built) != 1:
        raise BuildError(f"pip wheel produced {len(built)} wheels", f"in {stage}: {[p.name for p in built]}", f"see {log_path}")

    t0 = time.monotonic()
    tagged = _tag(job, benv, built[0], venv, base, log_path)
    repack_s = time.monotonic() - t0
    timings = record.WheelTimings(
        venv=round(venv_s, 1), venv_reused=reused, build=round(build_s, 1),
        tag_and_repack=round(repack_s, 1), total=round(time.monotonic() - started, 1),
    )
    rec = _wheel_record(job, benv, name, tagged, timings, wall_started)
    record.write_record(job.output / "wheel-record.json", rec)
    shutil.rmtree(stage, ignore_errors=True)
    shutil.rmtree(base / "repaired", ignore_errors=True)
    log(f"wheel: {tagged.wheel} sha256 {rec.sha256} ({rec.timings_s.total:.0f}s)")
    return rec


def _venv_dir(job: WheelJob, settings: Settings) -> Path:
    return settings.work_dir / "wheel" / "venv" / job.venv_key(job.runner.executable)


def _announce(job: WheelJob, offline: sandbox.Offline, log: Log) -> None:
    """The plan of the build, as the log's first lines."""
    what = f"{job.sdist.pin.file} (sha256 {job.sdist.pin.sha256[:12]}…, {job.sdist.origin})" if job.sdist else str(job.project)
    log(f"wheel: plan: {what} against LLVM {job.llvm.version} at {job.llvm.prefix} (recipe {job.recipe.name})")
    log(f"wheel:   toolchain {job.toolchain.label}" + (" (the LLVM's, from its record)" if job.llvm_record else ""))
    log(f"wheel:   python {job.python.version} ({job.python.executable}), SOURCE_DATE_EPOCH {job.epoch}")
    if job.build_python is not None:
        log(f"wheel:   cross-built for {job.python.arch} ({job.python.executable} under qemu-user, root {job.python.root}); "
            f"build venv from {job.runner.executable} ({job.runner.version}, {job.runner.arch})")
    log(f"wheel:   wheelhouse {job.wheelhouse} ({len(job.requirements.items)} pinned requirements)")
    log(f"wheel:   offline: {offline.reason}")


def _zig_files(job: WheelJob, benv: BuildEnv, tc_dir: Path, log: Log) -> Path:
    """A zig build's archiver, Debian's multiarch pyconfig.h shim, export map and CMake toolchain file."""
    bin_dir = Path(benv.prepared.env["CC"]).parent
    benv.env |= {"AR": str(bin_dir / "ar"), "RANLIB": str(bin_dir / "ranlib")}
    shim = None
    found = multiarch_pyconfig(job.python, job.toolchain) if job.python.multiarch else None
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
        benv.env["CFLAGS"] = " ".join([benv.maps, *([f"-isystem {shim}"] if shim else [])])
    return cmake_toolchain


def _pip_wheel(job: WheelJob, benv: BuildEnv, venv: Path, src: Path, build_dir: Path, stage: Path,
               cmake_toolchain: Path) -> list[str]:
    """`pip wheel` of the project, its CMake cache entries as config settings or (CMAKE_ARGS) in the environment."""
    defines = [("LLVM_DIR", str(job.llvm.cmake_dir)), ("CMAKE_TOOLCHAIN_FILE", str(cmake_toolchain)),
               *_cross_defines(job), *job.recipe.cmake_defines]
    settings_args = [f"--config-settings=build-dir={build_dir}"]
    if job.recipe.cmake_args == "CMAKE_ARGS":
        # the project splits it on spaces (paths have none: _no_spaces)
        benv.env["CMAKE_ARGS"] = " ".join(f"-D{k}={v}" for k, v in defines)
        settings_args = []
    else:
        settings_args += [f"--config-settings=cmake.define.{k}={v}" for k, v in defines]
    return [
        str(venv / "bin" / "python"), "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps",
        "--no-cache-dir", "-v", "--wheel-dir", str(stage), *settings_args, str(src),
    ]


@dataclass(frozen=True)
class _Tagged:
    wheel: Path  # the re-packed, tagged wheel in the output directory
    built_as: str  # the platform tag pip gave it
    source: str  # who vouched for the tag
    audit: dict[str, Any] | None  # auditwheel's report
    needs: dict[str, str]  # the highest symbol version its extensions need, per library


def _tag(job: WheelJob, benv: BuildEnv, raw: Path, venv: Path, base: Path, log_path: Path) -> _Tagged:
    """The wheel's extensions checked, its platform tag vouched for by auditwheel, re-packed into the output."""
    tc = job.toolchain
    current = WheelName.parse(raw.name).platform
    with tempfile.TemporaryDirectory(prefix="so-", dir=base) as tmp:
        needs: dict[str, str] = {}
        for so in extract_binaries(raw, Path(tmp)):
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
        out = benv.run([tool, "show", "--json", str(raw)], what="check the platform tag with auditwheel", cwd=base,
                       log_path=log_path)
        audit = parse_auditwheel(out)
    source = "auditwheel" if audit else "none: auditwheel not available"
    if tc.kind == "zig":
        # The tag is the toolchain's glibc floor, as far as auditwheel's policy for it accepts the wheel.
        want = manylinux_platform(tc.glibc, tc.arch)
        runner = foreign_auditwheel(venv, job.python.arch, job.python.executable,
                                    interpreter_runner(job.python.executable)[0]) if job.python.foreign else None
        raw = auditwheel_repair(tool, raw, want, base / "repaired", benv.env, benv.prefix, log_path, runner)
        source = f"auditwheel repair --plat {want}"
        wheel = repack(raw, job.output, job.epoch)
    else:
        tag = platform_from_audit(audit, current) if audit else current
        wheel = repack(raw, job.output, job.epoch, tag if tag != current else None)
    problems = verify_record(wheel)
    if problems:
        raise BuildError(f"the re-packed {wheel.name} is inconsistent", "; ".join(problems[:5]), "report this as a hermetic bug")
    return _Tagged(wheel, current, source, audit, needs)


def _wheel_record(job: WheelJob, benv: BuildEnv, name: str, tagged: _Tagged, timings: record.WheelTimings,
                  wall_started: float) -> record.WheelRecord:
    """The wheel's record (wheel-record.json)."""
    wheel, audit, needs, offline = tagged.wheel, tagged.audit, tagged.needs, benv.offline
    wname = WheelName.parse(wheel.name)
    return record.WheelRecord(
        wheel=wheel.name,
        sha256=file_sha256(wheel),
        size=wheel.stat().st_size,
        tag=wname.tag,
        platform_tag=record.PlatformTag(
            tag=wname.platform,
            source=tagged.source,
            auditwheel=audit_facts(audit) if audit else None,
            built_as=tagged.built_as,
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
        toolchain=record.ToolchainVersions.from_mapping(llvm_toolchain_versions(benv.env) | {"python": job.python.version}),
        toolchain_id=record.ToolchainRef.from_mapping(job.toolchain.identity()),
        started=times.iso(wall_started),
        finished=times.iso(time.time()),
        timings_s=timings,
    )
