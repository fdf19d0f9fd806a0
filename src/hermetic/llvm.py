"""Build a slim LLVM install tree by driving the Conan recipe, offline.

The recipe is copied into the work directory and built with a private
CONAN_HOME there, so builds neither read nor write the user's Conan state and
two builds in different directories share nothing.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import record, sandbox
from .digests import file_sha256
from .errors import BuildError, disk_full
from .log import Log
from .recipe import Recipe, Variant
from .settings import Settings


@dataclass(frozen=True)
class BuildInputs:
    recipe: Recipe
    variant: Variant
    source_archive: Path
    source_sha256: str
    sources: tuple[dict[str, str], ...]  # the release archives this source came from
    pruned: dict[str, Any] | None  # {"sha256", "size", "file"} when built from a pruned archive

    def digest(self) -> str:
        import hashlib

        data = {
            "recipe": self.recipe.digest(),
            "variant": self.variant.digest(),
            "source": self.source_sha256,
            "toolchain": _toolchain_digest(self.recipe.path.parents[1] / "toolchain"),
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _toolchain_digest(toolchain: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in toolchain.rglob("*") if p.is_file()):
        h.update(f.relative_to(toolchain).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build_dir(settings: Settings, variant: str) -> Path:
    return settings.work_dir / "llvm" / variant


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def toolchain_versions(env: dict[str, str]) -> dict[str, str]:
    cc = env.get("CC", "cc")
    cxx = env.get("CXX", "c++")
    return {
        "cc": _version([cc, "--version"]),
        "cxx": _version([cxx, "--version"]),
        "cmake": _version(["cmake", "--version"]),
        "ninja": _version(["ninja", "--version"]),
        "conan": _version([sys.executable, "-m", "conans.conan", "--version"]),
        "python": platform.python_version(),
        "machine": f"{platform.system().lower()}-{platform.machine()}",
    }


def _conan(settings: Settings) -> list[str]:
    exe = shutil.which("conan")
    return [exe] if exe else [sys.executable, "-m", "conans.conan"]


def build(settings: Settings, inputs: BuildInputs, log: Log, keep_build: bool = False) -> record.BuildRecord:
    """Build `inputs.variant` and return its record (also written to record.json)."""
    recipe, variant = inputs.recipe, inputs.variant
    out = build_dir(settings, variant.name)
    epoch = recipe.source_date_epoch
    offline, prefix = sandbox.offline_policy(settings.offline)
    log(f"build: offline: {offline.reason}")

    for sub in ("conan-home", "recipe", "install", "test_package"):
        shutil.rmtree(out / sub, ignore_errors=True)
    (out / "record.json").unlink(missing_ok=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(recipe.path, out / "recipe", ignore=shutil.ignore_patterns("__pycache__", "build"))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(out), exc) from exc
        raise
    conan_home = out / "conan-home"
    test_out = out / "test_package"
    test_out.mkdir()
    log_path = out / "build.log"
    log_path.write_text("")
    env = sandbox.build_env(
        epoch,
        {"CONAN_HOME": str(conan_home), "HERMETIC_TEST_OUTPUT": str(test_out), "NINJA_STATUS": "[%f/%t] "},
    )
    conan = _conan(settings)
    profile = settings.toolchain_dir / "profiles" / "hermetic"
    started = time.time()
    sandbox.run(
        [*conan, "profile", "detect", "--force"],
        what="detect the compiler for Conan",
        env=env,
        cwd=out,
        prefix=prefix,
        log_path=log_path,
        quiet=True,
    )
    options = [f"-o=llvm/*:variant={variant.name}"] + [f"-o=llvm/*:{k}={v}" for k, v in variant.options]
    confs = [
        f"-c=user.hermetic:source_archive={inputs.source_archive}",
        f"-c=user.hermetic:source_sha256={inputs.source_sha256}",
        f"-c=tools.build:jobs={settings.jobs}",
    ]
    log(f"build: llvm {recipe.version} variant {variant.name} with {settings.jobs} jobs (log: {log_path})")
    sandbox.run(
        [*conan, "create", str(out / "recipe"), f"-pr:a={profile}", *options, *confs, "--build=missing", "--no-remote"],
        what=f"build LLVM variant {variant.name}",
        env=env,
        cwd=out,
        prefix=prefix,
        log_path=log_path,
        quiet=settings.quiet,
        label=f"llvm-{variant.name}",
    )
    listing = sandbox.run(
        [*conan, "list", f"llvm/{recipe.version}:*", "--format=json"],
        what="find the built package", env=env, cwd=out, log_path=None, quiet=True,
    )
    pkg_ids = _package_ids(listing, recipe.version)
    if len(pkg_ids) != 1:
        raise BuildError("cannot find the package Conan built", f"found {len(pkg_ids)} packages", f"see {log_path}")
    ref = f"llvm/{recipe.version}:{pkg_ids[0]}"
    pkg = Path(sandbox.run([*conan, "cache", "path", ref], what="locate the package", env=env, cwd=out, quiet=True).strip())
    bdir = Path(sandbox.run([*conan, "cache", "path", ref, "--folder", "build"], what="locate the build", env=env, cwd=out, quiet=True).strip())
    commands_file = next(iter(bdir.rglob("hermetic-commands.txt")), None)
    commands = len(commands_file.read_text().splitlines()) if commands_file else None

    install = out / "install"
    install.mkdir()
    os.rename(pkg / "usr", install / "usr")
    record.normalize_tree(install, epoch)
    entries = record.scan_tree(install)
    wall = time.time() - started
    ptx = sorted(test_out.glob("*.ptx"))
    rec = record.BuildRecord(
        recipe=record.RecipeRef(recipe.name, recipe.version, recipe.digest()),
        variant=variant.name,
        options=tuple(sorted(dict(variant.options).items())),
        inputs_digest=inputs.digest(),
        sources=tuple(record.SourceOrigin.from_json(s, "build inputs", "sources") for s in inputs.sources),
        source_archive=record.SourceArchive(inputs.source_archive.name, inputs.source_sha256),
        pruned=record.PrunedSource.from_json(inputs.pruned, "build inputs", "pruned") if inputs.pruned else None,
        prefix=recipe.prefix(variant.name),
        source_date_epoch=epoch,
        offline=record.Offline(offline.enforced, offline.method, offline.reason),
        toolchain=record.ToolchainVersions.from_mapping(toolchain_versions(env)),
        jobs=settings.jobs,
        wall_time_s=round(wall, 1),
        started=iso_time(started),
        finished=iso_time(started + wall),
        build_commands=commands,
        test_package=record.TestPackage(True, tuple(record.PtxFile(p.name, file_sha256(p)) for p in ptx)),
        install_root=str(install),
        tree=record.Tree.from_entries(entries),
    )
    record.write_record(out / "record.json", rec)
    if not keep_build:
        shutil.rmtree(conan_home, ignore_errors=True)
    log(
        f"build: done in {wall:.0f}s: {rec.tree.digest} "
        f"({rec.tree.size / 1e6:.1f} MB, {len(entries)} entries) -> {install}"
    )
    return rec


def iso_time(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _package_ids(listing: str, version: str) -> list[str]:
    data = json.loads(listing[listing.index("{"):])
    ids: list[str] = []
    for cache in data.values():
        for ref, rrevs in cache.items():
            if not ref.startswith(f"llvm/{version}"):
                continue
            for rrev in rrevs.get("revisions", {}).values():
                ids.extend(rrev.get("packages", {}).keys())
    return ids
