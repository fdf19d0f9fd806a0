"""A bundle travels through a real registry: pushed with `hermetic push`, pulled back by reference, the same
digest, every blob checked, its inputs fed into a cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, hermetic
from hermetic import bundle, recipe
from hermetic.cli.bundle import _pull
from hermetic.digests import file_sha256

pytestmark = pytest.mark.integration


def _small_bundle(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    files = []
    for role, rel, data in (("pruned", "pruned/k/llvm-x.tar.xz", b"pruned"), ("wheelhouse", "wheelhouse/a.whl", b"w")):
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache / rel).write_bytes(data)
        files.append((bundle.Entry(role, Path(rel).name, rel, file_sha256(cache / rel), len(data)), cache / rel))
    rec = recipe.load(ROOT / "recipes")
    root = bundle.root_tar(ROOT, rec.source_date_epoch, ["build"])
    bundle.write(tmp_path / "b", "bundle-small", files, root, {"steps": []}, rec.digest())
    return tmp_path / "b"


def test_bundle_push_and_pull_by_reference(registry: Any, tmp_path: Path) -> None:
    local = bundle.open_layout(_small_bundle(tmp_path))
    ref = f"{registry.host}/bundles/small:1"
    pushed = hermetic("push", str(local.layout.path), ref, "--insecure", "--quiet").stdout
    assert local.manifest.digest in pushed
    got = bundle.open_layout(_pull(ref, tmp_path / "pulled", True, True))
    assert got.manifest.digest == local.manifest.digest and got.entries == local.entries
    bundle.feed(got, tmp_path / "root", tmp_path / "fed", lambda m: None)
    assert (tmp_path / "fed" / "wheelhouse" / "a.whl").read_bytes() == b"w"
