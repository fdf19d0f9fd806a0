"""A failed, interrupted or cut-off rebuild never destroys the previous good build."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import ROOT
from hermetic.build import buildenv as buildtools
from hermetic.build import llvm, sandbox, swap
from hermetic.core.errors import SubprocessFailed
from hermetic.model import recipe, toolchains
from hermetic.model.settings import Settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _no_build_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The pinned CMake and Ninja come from a wheelhouse these unit tests have none of."""
    tools = buildtools.BuildTools((buildtools.Tool("cmake", "0", "cmake.whl", "00" * 32, tmp_path / "bin"),))
    monkeypatch.setattr(buildtools, "ensure", lambda settings, log=None: tools)
    monkeypatch.setattr(buildtools, "check_versions", lambda tools, env: {})


def _good_build(out: Path) -> dict[str, object]:
    """What a finished build leaves: an install tree, the test_package output and a record naming the tree."""
    (out / "install" / "usr").mkdir(parents=True)
    (out / "install" / "usr" / "lib.a").write_bytes(b"good")
    (out / "test_package").mkdir()
    rec = {"tree": {"digest": "sha256:good"}, "install_root": str(out / "install")}
    (out / "record.json").write_text(json.dumps(rec))
    return rec


def _inputs(tmp_path: Path) -> tuple[Settings, llvm.BuildInputs]:
    settings = Settings(root=ROOT, cache_dir=tmp_path / "c", work_dir=tmp_path / "w", quiet=True, offline="off")
    rec = recipe.load(ROOT / "recipes")
    variant = recipe.resolve_variant(rec, "support")
    archive = tmp_path / "src.tar.xz"
    archive.write_bytes(b"x")
    host = toolchains.for_root(ROOT, "host")  # the machine's compiler: nothing to fetch in a unit test
    return settings, llvm.BuildInputs(rec, variant, archive, "00" * 32, (), None, source_mode="path", toolchain=host)


@pytest.mark.parametrize("failure", [SubprocessFailed("build LLVM", ["conan", "create"], 1, "boom"), KeyboardInterrupt()])
def test_failed_rebuild_keeps_the_previous_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    settings, inputs = _inputs(tmp_path)
    out = llvm.build_dir(settings, "llvm/support")
    rec = _good_build(out)
    seen: list[Path] = []

    def fail(argv: list[str], **kw: object) -> str:
        # the rebuild is under way in .new when it fails
        seen.append(out / swap.NEW)
        assert (out / swap.NEW / "recipe").is_dir()
        raise failure

    monkeypatch.setattr(sandbox, "run", fail)
    with pytest.raises(type(failure)):
        llvm.build(settings, inputs, lambda m: None)
    assert seen, "the build never started"
    assert json.loads((out / "record.json").read_text()) == rec
    assert (out / "install" / "usr" / "lib.a").read_bytes() == b"good"
    assert not (out / swap.NEW).exists(), "the partial build (Conan home and all) must not stay behind"


def test_kept_partial_build_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings, inputs = _inputs(tmp_path)
    out = llvm.build_dir(settings, "llvm/support")
    _good_build(out)

    def fail(argv: list[str], **kw: object) -> str:
        raise SubprocessFailed("build LLVM", ["conan"], 1, "boom")

    monkeypatch.setattr(sandbox, "run", fail)
    logged: list[str] = []
    with pytest.raises(SubprocessFailed):
        llvm.build(settings, inputs, logged.append, keep_build=True)
    assert (out / swap.NEW / "recipe").is_dir() and any(str(out / swap.NEW) in m for m in logged)


def _cut_off_swap(out: Path, after_commit: bool) -> None:
    """The state a swap leaves when killed between its renames (see swap.swap_in)."""
    (out / ".swap").write_text("sha256:new\n")
    for name in ("install", "test_package"):
        os.rename(out / name, out / f".old-{name}")
        (out / name).mkdir()
        (out / name / "new").write_text("new")
    if after_commit:
        (out / "record.json").write_text(json.dumps({"tree": {"digest": "sha256:new"}}))


def test_swap_cut_off_before_the_record_rolls_back(tmp_path: Path) -> None:
    out = tmp_path / "b"
    rec = _good_build(out)
    _cut_off_swap(out, after_commit=False)
    swap.recover(out)
    assert json.loads((out / "record.json").read_text()) == rec
    assert (out / "install" / "usr" / "lib.a").read_bytes() == b"good"
    assert not list(out.glob(".old-*")) and not (out / ".swap").exists()


def test_swap_cut_off_after_the_record_completes(tmp_path: Path) -> None:
    out = tmp_path / "b"
    _good_build(out)
    _cut_off_swap(out, after_commit=True)
    swap.recover(out)
    assert (out / "install" / "new").read_text() == "new"
    assert not list(out.glob(".old-*")) and not (out / ".swap").exists()


def test_keep_build_keeps_the_build_directory_of_a_good_build(tmp_path: Path) -> None:
    out = tmp_path / "b"
    _good_build(out)
    new = out / swap.NEW
    (new / "install" / "usr").mkdir(parents=True)
    (new / "test_package").mkdir()
    (new / "conan-home" / "p").mkdir(parents=True)
    (new / "record.json").write_text(json.dumps({"tree": {"digest": "sha256:new"}}))
    swap.swap_in(new, out, "sha256:new", keep_build=True)
    assert (out / "conan-home" / "p").is_dir() and not new.exists()
    assert json.loads((out / "record.json").read_text())["tree"]["digest"] == "sha256:new"
