"""Versions are data: conandata.yml pins several LLVM releases, --llvm-version picks one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hermetic.core.errors import RecipeError, UsageError
from hermetic.fetch import sources
from hermetic.model import options, recipe

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit


def test_default_release_and_a_second_one_side_by_side() -> None:
    old = recipe.load(ROOT / "recipes")
    new = recipe.load(ROOT / "recipes", version="22.1.8")
    assert (old.version, new.version) == ("19.1.7", "22.1.8")
    assert old.versions == new.versions == ("19.1.7", "22.1.8")
    # each release has its own archives, epoch and prefix, and its own recipe digest
    assert {a.file for a in new.archives} == {"llvm-toolchain-22_22.1.8.orig.tar.xz"}
    assert new.source_date_epoch != old.source_date_epoch
    assert new.prefix("support") == "/usr/lib64/llvm-support-22.1.8"
    assert new.digest() != old.digest()
    # the default release keeps its build directory; another one builds beside it
    assert old.build_name("support") == "support"
    assert new.build_name("support") == "support-22.1.8"


def test_a_new_release_or_variant_changes_no_other_builds_digest(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "recipes" / "llvm", tmp_path / "llvm")
    before = recipe.load(tmp_path)
    nvptx = recipe.resolve_variant(before, "nvptx")
    v = tmp_path / "llvm" / "variants.yml"
    v.write_text(v.read_text() + '  extra:\n    options: {targets: "ARM", projects: "llvm", components: "LLVMSupport", tools: ""}\n')
    data = tmp_path / "llvm" / "conandata.yml"
    pinned = data.read_text()
    data.write_text(pinned.replace("sources:\n", 'sources:\n  "18.1.8":\n    source_date_epoch: 1\n    archives: []\n'
                                   '    prune: {keep_top: [], drop_top: [], drop_in_project: [], td_always: []}\n', 1))
    after = recipe.load(tmp_path)
    assert "18.1.8" in after.versions and recipe.resolve_variant(after, "extra").name == "extra"
    assert after.digest() == before.digest() and recipe.resolve_variant(after, "nvptx").digest() == nvptx.digest()
    # what the release's build does use still counts: its pins, the recipe's files
    data.write_text(pinned.replace("source_date_epoch:", "source_date_epoch: 1 #", 1))
    assert recipe.load(tmp_path).digest() != before.digest()
    data.write_text(pinned)
    (tmp_path / "llvm" / "conanfile.py").write_text((tmp_path / "llvm" / "conanfile.py").read_text() + "\n# changed\n")
    assert recipe.load(tmp_path).digest() != before.digest()


def test_unknown_release_lists_the_pinned_ones() -> None:
    with pytest.raises(RecipeError) as exc:
        recipe.load(ROOT / "recipes", version="23.1.0")
    assert "19.1.7, 22.1.8" in exc.value.why
    assert "--llvm-version" in exc.value.fix


def test_a_variant_names_the_releases_its_library_list_belongs_to() -> None:
    new = recipe.load(ROOT / "recipes", version="22.1.8")
    with pytest.raises(RecipeError) as exc:
        recipe.resolve_variant(new, "nvptx")
    assert "19.1.7" in exc.value.why and "support" in exc.value.fix
    assert recipe.resolve_variant(new, "support").name == "support"


def test_a_variant_naming_an_unpinned_release_is_refused(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "recipes" / "llvm", tmp_path / "llvm")
    v = tmp_path / "llvm" / "variants.yml"
    v.write_text(v.read_text().replace('versions: ["19.1.7"]', 'versions: ["18.1.0"]', 1))
    with pytest.raises(RecipeError, match=r"18\.1\.0"):
        recipe.load(tmp_path)


def test_llvm_version_from_flag_env_and_pyproject(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    (tmp_path / "pyproject.toml").write_text('[tool.hermetic]\nllvm_version = "22.1.8"\n')
    assert options.resolve({}, {}, tmp_path).llvm_version == "22.1.8"
    assert options.resolve({}, {"HERMETIC_LLVM_VERSION": "19.1.7"}, tmp_path).llvm_version == "19.1.7"
    flag = options.resolve({"llvm_version": "19.1.7"}, {"HERMETIC_LLVM_VERSION": "22.1.8"}, tmp_path)
    assert flag.llvm_version == "19.1.7"
    (tmp_path / "pyproject.toml").write_text("[tool.hermetic]\nllvm = 1\n")
    with pytest.raises(UsageError) as exc:
        options.resolve({}, {}, tmp_path)
    assert "llvm_version" in exc.value.fix


PRINT_URIS = """\
'http://archive.invalid/debian-security/pool/updates/main/l/llvm-toolchain-22/llvm-toolchain-22_22.1.8-1~deb12u1.dsc' llvm-toolchain-22_22.1.8-1~deb12u1.dsc 13628 SHA256:748f
'http://archive.invalid/debian-security/pool/updates/main/l/llvm-toolchain-22/llvm-toolchain-22_22.1.8.orig.tar.xz' llvm-toolchain-22_22.1.8.orig.tar.xz 196630560 SHA256:b49b
"""


def test_other_pools_are_the_same_path_under_each_archive() -> None:
    bases = ["http://archive.invalid/debian", "http://archive.invalid/debian-security/"]
    got = sources.other_pools(PRINT_URIS, "llvm-toolchain-22_22.1.8.orig.tar.xz", bases)
    assert got == [
        "http://archive.invalid/debian/pool/main/l/llvm-toolchain-22/llvm-toolchain-22_22.1.8.orig.tar.xz",
        "http://archive.invalid/debian-security/pool/main/l/llvm-toolchain-22/llvm-toolchain-22_22.1.8.orig.tar.xz",
    ]
    # a file apt did not print has no other pool; the URI apt already tried is not tried again
    assert sources.other_pools(PRINT_URIS, "other.tar.xz", bases) == []
    main_only = "'http://archive.invalid/debian/pool/main/l/x/x.orig.tar.xz' x.orig.tar.xz 1 SHA256:00\n"
    assert sources.other_pools(main_only, "x.orig.tar.xz", ["http://archive.invalid/debian"]) == []


def test_every_command_naming_a_build_takes_the_release() -> None:
    from hermetic.__main__ import build_parser

    parser = build_parser()
    for argv in (["build", "llvm"], ["all"], ["fetch"], ["source", "prune"], ["image", "llvm"], ["wheel"]):
        args = parser.parse_args([*argv, "--llvm-version", "22.1.8"])
        assert args.llvm_version == "22.1.8", argv
