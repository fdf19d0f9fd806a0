"""Bundles for real: one travels through a real registry (pushed with `hermetic push`, pulled back by
reference, the same digest, every blob checked); the tiny recipe is rebuilt from its bundle alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, TINY, hermetic
from hermetic.core.digests import file_sha256
from hermetic.model import recipe
from hermetic.oci import bundle as bundle_format
from hermetic.plan import bundle
from hermetic.plan.bundle import _pull

pytestmark = pytest.mark.integration


def _small_bundle(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    files = []
    for role, rel, data in (("pruned", "pruned/k/llvm-x.tar.xz", b"pruned"), ("wheelhouse", "wheelhouse/a.whl", b"w")):
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache / rel).write_bytes(data)
        files.append((bundle_format.Entry(role, Path(rel).name, rel, file_sha256(cache / rel), len(data)), cache / rel))
    rec = recipe.load(ROOT / "recipes")
    root = bundle.root_tar(ROOT, rec.source_date_epoch, ["build"])
    bundle_format.write(tmp_path / "b", "bundle-small", files, root, {"steps": []},
                 bundle_format.RecipeRef("recipes/llvm", rec.version, rec.digest()))
    return tmp_path / "b"


def test_bundle_push_and_pull_by_reference(registry: Any, tmp_path: Path) -> None:
    local = bundle_format.open_layout(_small_bundle(tmp_path))
    ref = f"{registry.host}/bundles/small:1"
    pushed = hermetic("push", str(local.layout.path), ref, "--insecure", "--quiet").stdout
    assert local.manifest.digest in pushed
    pulled = _pull(ref, tmp_path / "pulled", True, True)
    got = bundle_format.open_layout(pulled)
    assert got.manifest.digest == local.manifest.digest and got.entries == local.entries
    bundle_format.feed(got, tmp_path / "root", tmp_path / "fed", lambda m: None)
    assert (tmp_path / "fed" / "wheelhouse" / "a.whl").read_bytes() == b"w"
    # inspect tells a bundle from an image: by reference it says how to look, pulled it lists the inputs
    remote = hermetic("inspect", ref, "--insecure", check=False)
    assert remote.returncode == 2 and "is a hermetic bundle, not an image" in remote.stderr
    assert "--layout DIR" in remote.stderr and "Traceback" not in remote.stderr
    shown = json.loads(hermetic("inspect", str(pulled), "--json").stdout)
    assert shown["artifact"]["kind"] == "bundle" and shown["artifact"]["digest"] == local.manifest.digest


def test_the_tiny_recipe_rebuilt_from_its_bundle_alone(
    tiny_install: Path, tiny: tuple[str, ...], source_cache: Path, tmp_path: Path
) -> None:
    """The whole round trip in seconds: bundle tiny's `support`, rebuild it with no network, an empty cache and
    only the bundle: the same inputs digest and tree digest as the normal build."""
    out = tmp_path / "bundle"
    hermetic("bundle", *tiny, "--variant", "support", "--toolchain", "host", "--cache", str(source_cache),
             "--work-dir", str(tmp_path / "w0"), "--output", str(out), "--quiet")
    opened = bundle_format.open_layout(out)
    assert {e.role for e in opened.entries} >= {"root", "plan", "pruned", "pruned-meta", "wheelhouse"}
    assert opened.llvm_recipe == TINY.relative_to(ROOT).as_posix()
    work, empty = tmp_path / "w1", tmp_path / "empty-cache"
    argv = [sys.executable, "-m", "hermetic", "build", "llvm", "--variant", "support", "--toolchain", "host",
            "--bundle", str(out), "--work-dir", str(work), "--cache", str(empty), "--offline", "auto", "--quiet"]
    unshare = shutil.which("unshare")
    if unshare and os.geteuid() == 0 and subprocess.run([unshare, "--net", "true"]).returncode == 0:
        argv = [unshare, "--net", *argv]  # no route anywhere: only the bundle can feed this build
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    got = json.loads(proc.stdout)
    want = json.loads(tiny_install.read_text())
    assert got["tree_digest"] == want["tree"]["digest"]
    assert json.loads(Path(got["record"]).read_text())["inputs_digest"] == want["inputs_digest"]
    assert not empty.exists(), "the rebuild used a cache other than the bundle's"
