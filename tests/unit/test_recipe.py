from __future__ import annotations

from pathlib import Path

import pytest

from hermetic.core.errors import RecipeError
from hermetic.model import recipe

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def llvm() -> recipe.Recipe:
    return recipe.load(ROOT / "recipes")


def test_pins_both_archives_of_the_release(llvm: recipe.Recipe) -> None:
    assert llvm.version == "19.1.7"
    digests = {a.origin: a.sha256 for a in llvm.archives}
    assert digests == {
        "upstream": "82401fea7b79d0078043f7598b835284d6650a75b93e64b6f761ea7b63097501",
        "debian": "ae498f3bc58ae2d9f64ef5f0c035c4240152bf015a5b7738b15c22e93bdc97ce",
    }


def test_variants_as_design_defines_them(llvm: recipe.Recipe) -> None:
    assert llvm.default_variant == "nvptx"
    nvptx, support, triton = (llvm.variant(n) for n in ("nvptx", "support", "triton"))
    assert nvptx.values("targets") == ["NVPTX", "X86"]
    assert {"LLVMNVPTXCodeGen", "LLVMCore", "llvm-headers", "cmake-exports"} <= set(nvptx.values("components"))
    assert " " not in nvptx.option("components")
    assert support.values("components") == ["LLVMDemangle", "LLVMSupport", "llvm-headers", "cmake-exports"]
    assert triton.values("projects") == ["llvm", "mlir"]
    assert triton.values("tools") == ["llvm-tblgen", "mlir-tblgen"]
    assert llvm.prefix("nvptx") == "/usr/lib64/llvm-nvptx-19.1.7"


def test_unknown_variant_lists_valid_ones(llvm: recipe.Recipe) -> None:
    with pytest.raises(RecipeError) as exc:
        llvm.variant("cuda")
    assert "nvptx, support, triton" in exc.value.fix


def test_unknown_option_lists_valid_options(llvm: recipe.Recipe) -> None:
    with pytest.raises(RecipeError) as exc:
        recipe.resolve_variant(llvm, "nvptx", {"target": "X86"})
    assert "targets, projects, components, tools" in exc.value.fix


def test_unknown_target_lists_valid_targets(llvm: recipe.Recipe) -> None:
    with pytest.raises(RecipeError) as exc:
        recipe.resolve_variant(llvm, "nvptx", {"targets": "NVPTX;Z80"})
    assert "Z80" in exc.value.what
    assert "AMDGPU" in exc.value.fix and "NVPTX" in exc.value.fix


def test_unknown_component_and_tool_refused(llvm: recipe.Recipe) -> None:
    with pytest.raises(RecipeError, match="llvm-objdump"):
        recipe.resolve_variant(llvm, "support", {"components": "LLVMSupport;llvm-objdump"})
    with pytest.raises(RecipeError, match="clang"):
        recipe.resolve_variant(llvm, "support", {"tools": "clang"})


def test_override_is_normalized_and_changes_digest(llvm: recipe.Recipe) -> None:
    base = recipe.resolve_variant(llvm, "nvptx")
    narrowed = recipe.resolve_variant(llvm, "nvptx", {"targets": " NVPTX ; "})
    assert narrowed.option("targets") == "NVPTX"
    assert narrowed.digest() != base.digest()
    assert recipe.resolve_variant(llvm, "nvptx").digest() == base.digest()


def test_broken_recipe_data_is_a_recipe_error(tmp_path: Path) -> None:
    d = tmp_path / "llvm"
    d.mkdir()
    (d / "conandata.yml").write_text("sources: [unclosed\n")
    (d / "variants.yml").write_text("default: x\n")
    with pytest.raises(RecipeError, match="cannot parse"):
        recipe.load(tmp_path)
