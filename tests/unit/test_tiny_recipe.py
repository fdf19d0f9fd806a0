"""The tiny test recipe is data like recipes/llvm: its archive is the pinned one, and hermetic loads it the same way."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from helpers import ROOT, TINY
from hermetic.build import llvm
from hermetic.core.errors import RecipeError
from hermetic.model import recipe

sys.path.insert(0, str(TINY.parent))
import tiny_archive


def test_the_source_tree_gives_the_pinned_archive(tmp_path: Path) -> None:
    """An edit of tests/recipes/tiny-src must come with a new pin in conandata.yml, as a new release would."""
    pin = tiny_archive.pinned()
    first = tiny_archive.write(tmp_path / "a")
    again = tiny_archive.write(tmp_path / "elsewhere" / "b")
    got = hashlib.sha256(first.read_bytes()).hexdigest()
    assert got == hashlib.sha256(again.read_bytes()).hexdigest()
    assert got == pin["sha256"], f"pin {got} in {TINY / 'conandata.yml'}"


def test_tiny_loads_as_a_recipe_of_its_own() -> None:
    rec = recipe.load_at(TINY, None, ROOT)
    assert (rec.name, rec.version, rec.default_variant) == ("tiny", "1.0.0", "support")
    assert rec.build_path("full") == "tiny/full" and rec.title("full") == "tiny-full-1.0.0"
    assert rec.prefix("full") == "/usr/lib64/tiny-full-1.0.0" and rec.pruned_root == "tiny-1.0.0.src"
    # built with this checkout's toolchain/, as recipes/llvm is
    assert rec.project_root == ROOT
    llvm_rec = recipe.load(ROOT / "recipes")
    assert llvm_rec.project_root == ROOT and llvm_rec.pruned_root == "llvm-project-19.1.7.src"
    assert llvm_rec.build_path("support") == "llvm/support"
    variant = recipe.resolve_variant(rec, "support")
    src = llvm.source_identity("pruned")
    assert llvm.inputs_digest(rec, variant, src) != llvm.inputs_digest(llvm_rec, recipe.resolve_variant(llvm_rec, "support"), src)


def test_an_unknown_component_of_tiny_is_refused_with_the_valid_ones() -> None:
    rec = recipe.load_at(TINY, None, ROOT)
    with pytest.raises(RecipeError) as err:
        recipe.resolve_variant(rec, "support", {"components": "TinySupport;LLVMCore"})
    assert "LLVMCore" in err.value.what


def test_a_directory_without_a_conanfile_is_no_recipe(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as err:
        recipe.load_at(tmp_path)
    assert err.value.what == f"no recipe at {tmp_path}" and "--llvm-recipe" in err.value.fix
