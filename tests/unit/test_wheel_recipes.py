"""Wheel recipes as data: the compiler core and third-party sdists (llvmlite), which wheels a plan builds against
which tree, and the sdist's fetch, verification and unpacking."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from helpers import ROOT, hermetic
from hermetic.build import llvm_prefix, wrappers
from hermetic.core import platforms
from hermetic.core.errors import ExitCode, RecipeError, SourceError
from hermetic.fetch import sdist
from hermetic.model import toolchains, wheels
from hermetic.model.settings import Settings
from hermetic.plan import pipeline as plan

pytestmark = pytest.mark.unit

RECIPES = ROOT / "recipes"


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True, **kw)  # type: ignore[arg-type]


def test_the_checkout_has_the_compiler_core_and_llvmlite() -> None:
    assert wheels.wheel_recipe_names(RECIPES)[0] == "compiler" and "llvmlite" in wheels.wheel_recipe_names(RECIPES)
    lite = wheels.load_wheel_recipe(RECIPES, "llvmlite")
    assert lite.sdist is not None and lite.sdist.file == "llvmlite-0.50.0.tar.gz" and len(lite.sdist.sha256) == 64
    assert lite.llvm_versions == ("22.1.8",) and lite.cmake_args == "CMAKE_ARGS"
    assert lite.zig_link.drop == ("-Wl,--exclude-libs,ALL",) and lite.zig_link.exports == ("LLVMPY_*",)
    core = wheels.load_wheel_recipe(RECIPES)
    assert core.sdist is None and core.project == "src/compiler" and core.needs_targets == ("NVPTX",)


def test_each_release_and_variant_gets_the_wheels_that_build_against_it() -> None:
    def names(version: str, variant: str, targets: tuple[str, ...]) -> tuple[list[str], list[str]]:
        fit, why = wheels.matching_recipes(RECIPES, version, "19.1.7", variant, targets)
        return [w.name for w in fit], why

    assert names("19.1.7", "nvptx", ("NVPTX",))[0] == ["compiler"]
    assert names("22.1.8", "llvmlite", ("X86", "NVPTX"))[0] == ["llvmlite"]
    fit, why = names("19.1.7", "support", ())
    assert fit == [] and "compiler needs the target NVPTX, which support leaves out" in why
    assert "llvmlite builds against LLVM 22.1.8, not 19.1.7" in why


def test_llvmlite_needs_the_target_of_the_machine_its_jit_runs_on() -> None:
    def names(variant: str, targets: tuple[str, ...], arch: str) -> tuple[list[str], list[str]]:
        fit, why = wheels.matching_recipes(RECIPES, "22.1.8", "19.1.7", variant, targets, arch)
        return [w.name for w in fit], why

    assert names("llvmlite", ("X86", "NVPTX"), "amd64")[0] == ["llvmlite"]
    assert names("llvmlite-arm64", ("AArch64", "NVPTX"), "arm64")[0] == ["llvmlite"]
    fit, why = names("llvmlite", ("X86", "NVPTX"), "arm64")
    assert fit == [] and any("llvmlite on arm64 needs the target AArch64" in w for w in why)
    fit, why = names("llvmlite-arm64", ("AArch64", "NVPTX"), "amd64")
    assert fit == [] and any("llvmlite on amd64 needs the target X86" in w for w in why)
    # the compiler core lowers to PTX only: it does not care about the machine's target
    assert wheels.load_wheel_recipe(RECIPES).missing_host_target("arm64", ("NVPTX",)) == ""


def test_a_tree_without_the_host_target_is_refused_before_the_sdist_is_fetched(tmp_path: Path) -> None:
    cmake = tmp_path / "llvm" / "lib" / "cmake" / "llvm"
    cmake.mkdir(parents=True)
    (cmake / "LLVMConfig.cmake").write_text('set(LLVM_PACKAGE_VERSION 22.1.8)\nset(LLVM_TARGETS_TO_BUILD AArch64;NVPTX)\n')
    assert llvm_prefix.inspect_llvm(tmp_path / "llvm", 22).targets == ("AArch64", "NVPTX")
    want = platforms.PLATFORMS[platforms.machine_arch()].llvm_target
    if want == "AArch64":
        (cmake / "LLVMConfig.cmake").write_text('set(LLVM_PACKAGE_VERSION 22.1.8)\nset(LLVM_TARGETS_TO_BUILD X86;NVPTX)\n')
    proc = hermetic("wheel", "--recipe", "llvmlite", "--llvm", str(tmp_path / "llvm"), "--toolchain", "host",
                    "--cache", str(tmp_path / "cache"), "--work-dir", str(tmp_path / "w"), "--no-urls", check=False)
    assert proc.returncode == ExitCode.USAGE and "Traceback" not in proc.stderr, proc.stderr
    assert f"has no {want} target" in proc.stderr and "llvmlite-arm64" in proc.stderr
    assert not (tmp_path / "cache" / "sdists").exists()


def test_the_llvmlite_plan_builds_its_sdist_and_fetches_its_requirements(tmp_path: Path) -> None:
    job = plan.plan_all(_settings(tmp_path, toolchain="zig", variant="llvmlite", llvm_version="22.1.8"), lambda m: None)
    step = job.step("wheel")
    assert step.state == plan.RUN and step.name == "wheel llvmlite 0.50.0"
    assert "llvmlite-0.50.0.tar.gz (sha256 f2a2cd6ec9ff" in step.detail
    core = plan.plan_all(_settings(tmp_path, toolchain="zig"), lambda m: None)
    assert core.step("wheel").name == "wheel src/compiler"
    # setuptools and wheel are llvmlite's alone: its plan's wheelhouse holds more pins, under another digest
    assert job.step("wheelhouse").inputs_digest != core.step("wheelhouse").inputs_digest
    files = wheels.requirement_files(_settings(tmp_path), [wheels.load_wheel_recipe(RECIPES, "llvmlite")])
    assert [f.relative_to(ROOT).as_posix() for f in files] == ["toolchain/build-requirements.txt",
                                                               "recipes/llvmlite/build-requirements.txt"]


def _recipe(tmp_path: Path, data: object) -> Path:
    d = tmp_path / "recipes" / "thing"
    d.mkdir(parents=True, exist_ok=True)
    (d / "wheel.yml").write_text(yaml.safe_dump(data))
    return tmp_path / "recipes"


GOOD_SDIST = {"name": "thing", "version": "1.0", "file": "thing-1.0.tar.gz", "sha256": "0" * 64, "strip_root": "thing-1.0"}


@pytest.mark.parametrize("data, says", [
    ({"requirements": "r.txt"}, "project or sdist"),
    ({"requirements": "r.txt", "project": "p", "sdist": GOOD_SDIST, "source_date_epoch": 1}, "project or sdist"),
    ({"requirements": "r.txt", "sdist": {**GOOD_SDIST, "sha256": "abc"}, "source_date_epoch": 1}, "sdist is malformed"),
    ({"requirements": "r.txt", "sdist": GOOD_SDIST}, "needs source_date_epoch"),
    ({"requirements": "r.txt", "project": "p", "cmake_args": "CMAKE_FLAGS"}, "cmake_args is 'CMAKE_FLAGS'"),
    ({"requirements": "r.txt", "project": "p", "zig_link": {"dorp": []}}, "zig_link is malformed"),
    ({"requirements": "r.txt", "project": "p", "variants": "llvmlite"}, "variants must be a list"),
])
def test_a_malformed_recipe_says_what_is_wrong(tmp_path: Path, data: object, says: str) -> None:
    with pytest.raises(RecipeError) as exc:
        wheels.load_wheel_recipe(_recipe(tmp_path, data), "thing")
    assert says in exc.value.what + exc.value.why + exc.value.fix


def test_an_unknown_recipe_lists_the_known_ones() -> None:
    with pytest.raises(RecipeError) as exc:
        wheels.load_wheel_recipe(RECIPES, "nosuch")
    assert "compiler" in exc.value.why and "llvmlite" in exc.value.why


def _tar(entries: list[tuple[str, bytes | None]], **extra: object) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            for k, v in extra.items():
                setattr(info, k, v)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _pin(data: bytes, url: str = "") -> wheels.SdistPin:
    return wheels.SdistPin("thing", "1.0", "thing-1.0.tar.gz", hashlib.sha256(data).hexdigest(), url, "thing-1.0")


def test_an_sdist_is_admitted_from_a_mirror_only_by_its_pin(tmp_path: Path) -> None:
    data = _tar([("thing-1.0", None), ("thing-1.0/setup.py", b"print('hi')\n")])
    pin = _pin(data)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / pin.file).write_bytes(data + b"tampered")
    with pytest.raises(SourceError) as exc:
        sdist.fetch(tmp_path / "cache", pin, [mirror], False, lambda m: None)
    assert "does not match its pinned digest" in exc.value.what
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # nothing was cached
    (mirror / pin.file).write_bytes(data)
    got = sdist.fetch(tmp_path / "cache", pin, [mirror], False, lambda m: None)
    assert got.origin == f"mirror:{mirror / pin.file}" and got.path.read_bytes() == data
    # cached from now on, and hashed again on every use: a damaged copy is refused, not used
    got.path.write_bytes(b"damaged")
    with pytest.raises(SourceError):
        sdist.require(got)


def test_no_origin_says_what_was_tried(tmp_path: Path) -> None:
    pin = _pin(b"x", url="https://example.invalid/thing-1.0.tar.gz")
    with pytest.raises(SourceError) as exc:
        sdist.fetch(tmp_path / "cache", pin, [tmp_path], False, lambda m: None)
    assert str(tmp_path / pin.file) in exc.value.why and "--mirror" in exc.value.fix


def test_unpacking_strips_the_top_directory_and_refuses_escapes(tmp_path: Path) -> None:
    good = _tar([("thing-1.0", None), ("thing-1.0/pkg", None), ("thing-1.0/pkg/a.py", b"A = 1\n")])
    path = tmp_path / "good.tar.gz"
    path.write_bytes(good)
    sdist.unpack(sdist.CachedSdist(_pin(good), path, "test"), tmp_path / "out")
    assert (tmp_path / "out" / "pkg" / "a.py").read_text() == "A = 1\n"
    for i, entries in enumerate([[("other/setup.py", b"")], [("thing-1.0/../../escape.py", b"")]]):
        bad = _tar(entries)
        path.write_bytes(bad)
        with pytest.raises(SourceError):
            sdist.unpack(sdist.CachedSdist(_pin(bad), path, "test"), tmp_path / f"bad{i}")
        assert not (tmp_path / "escape.py").exists()


def test_the_compiler_wrappers_drop_the_flags_a_recipe_names(tmp_path: Path) -> None:
    fake = tmp_path / "zig-root"
    fake.mkdir()
    (fake / "zig").write_text('#!/bin/sh\nfor a; do echo "$a"; done\n')
    (fake / "zig").chmod(0o755)
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    plain = wrappers.wrapper_scripts(tc, fake, tmp_path / "cache")
    # no flags named: the LLVM builds' wrappers stay byte for byte what they were
    assert plain == wrappers.wrapper_scripts(tc, fake, tmp_path / "cache", ())
    scripts = wrappers.wrapper_scripts(tc, fake, tmp_path / "cache", ("-Wl,--exclude-libs,ALL",))
    cxx = tmp_path / "c++"
    cxx.write_text(scripts["c++"])
    cxx.chmod(0o755)
    args = subprocess.run([str(cxx), "-stdlib=libc++", "-Wl,--exclude-libs,ALL", "-Wl,-Bsymbolic", "a b.o"],
                          capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]}).stdout.splitlines()
    assert "-Wl,--exclude-libs,ALL" not in args and "-stdlib=libc++" not in args
    assert "-Wl,-Bsymbolic" in args and "a b.o" in args


def test_the_cli_refuses_a_project_for_an_sdist_recipe_and_an_unknown_recipe(tmp_path: Path) -> None:
    llvm = tmp_path / "llvm"
    shutil.copytree(ROOT / "recipes", tmp_path / "unused")  # nothing is fetched or built before the refusal
    proc = hermetic("wheel", str(ROOT / "src" / "compiler"), "--recipe", "llvmlite", "--llvm", str(llvm),
                    "--cache", str(tmp_path / "cache"), "--work-dir", str(tmp_path / "w"), check=False)
    assert proc.returncode == ExitCode.USAGE and "builds its pinned sdist" in proc.stderr and "Traceback" not in proc.stderr
    proc = hermetic("wheel", "--recipe", "nosuch", "--llvm", str(llvm), "--cache", str(tmp_path / "cache"),
                    "--work-dir", str(tmp_path / "w"), check=False)
    assert proc.returncode == ExitCode.RECIPE and "llvmlite" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists()


def test_an_sdist_comes_from_its_url_when_no_mirror_has_it(tmp_path: Path) -> None:
    data = _tar([("thing-1.0", None), ("thing-1.0/setup.py", b"")])
    published = tmp_path / "published" / "thing-1.0.tar.gz"
    published.parent.mkdir()
    published.write_bytes(data)
    pin = _pin(data, url=published.as_uri())  # urllib opens file: URLs as it opens https: ones
    got = sdist.fetch(tmp_path / "cache", pin, [tmp_path / "empty-mirror"], True, lambda m: None)
    assert got.origin == f"url:{published.as_uri()}" and got.path.read_bytes() == data
    # a URL serving other bytes is refused, and nothing is cached
    published.write_bytes(data + b"x")
    with pytest.raises(SourceError):
        sdist.fetch(tmp_path / "cache2", pin, [], True, lambda m: None)
    assert not [p for p in (tmp_path / "cache2").rglob("*") if p.is_file()]
