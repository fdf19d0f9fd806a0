"""in-toto's own verifier (`in-toto-verify`) on a real LLVM build: the session's zig `support` tree, its image
signed by `hermetic image llvm --sign-key`, its links and a layout the owner signed. Green as built; red when
the image is rewritten from a tree with one byte changed. The integration tier runs every tampering on the
tiny recipe; this shows the chain holds for LLVM's own tree (seconds: the build is the session's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import hermetic, in_toto_verify, swap_in_tampered_image


@pytest.fixture(scope="module")
def evidence(zig_support_install: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(evidence directory, keys directory) of one builder of the zig support tree."""
    base = tmp_path_factory.mktemp("intoto-support")
    keys = base / "keys"
    keys.mkdir()
    for name in ("owner", "builder"):
        hermetic("key", "generate", str(keys / name), "--no-gpg", "--quiet")
    image = base / "image"
    hermetic("image", "llvm", "--record", str(zig_support_install), "--output", str(image),
             "--sign-key", str(keys / "builder.key"), "--work-dir", str(base), "--quiet")
    ev = base / "evidence"
    hermetic("intoto", "links", str(ev), "--record", str(zig_support_install), "--image", str(image),
             "--sign-key", str(keys / "builder.key"))
    hermetic("intoto", "layout", str(ev), "--builder", str(keys / "builder.pub"), "--sign-key", str(keys / "owner.key"))
    return ev, keys


def test_in_toto_verify_passes_on_the_support_build(evidence: tuple[Path, Path], tmp_path: Path) -> None:
    ev, keys = evidence
    mine = tmp_path / "evidence"
    shutil.copytree(ev, mine)
    proc = in_toto_verify(mine, keys / "owner.pub")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (mine / "unpacked").is_dir() and any((mine / "unpacked").rglob("libLLVMSupport.a"))


def test_a_changed_byte_in_the_support_tree_fails(
    evidence: tuple[Path, Path], zig_support_install: Path, tmp_path: Path
) -> None:
    ev, keys = evidence
    mine = tmp_path / "evidence"
    shutil.copytree(ev, mine)
    swap_in_tampered_image(zig_support_install, mine, tmp_path)
    proc = in_toto_verify(mine, keys / "owner.pub")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "RuleVerificationError" in proc.stderr and "image" in proc.stderr, proc.stderr
