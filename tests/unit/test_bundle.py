"""Bundles: one content-addressed OCI artifact of a plan's inputs; fed into a fresh cache only by sha256."""

from __future__ import annotations

import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import ROOT
from hermetic.core.digests import file_sha256
from hermetic.core.errors import SourceError, UsageError, VerifyError
from hermetic.model import recipe
from hermetic.oci import bundle as bundle_format
from hermetic.plan import bundle

pytestmark = pytest.mark.unit


def _files(tmp_path: Path) -> list[tuple[bundle_format.Entry, Path]]:
    cache = tmp_path / "cache"
    out = []
    for role, rel, data in (("pruned", "pruned/k/llvm-x.tar.xz", b"pruned bytes"),
                            ("wheelhouse", "wheelhouse/cmake-4.4.4-py3-none-any.whl", b"a wheel")):
        p = cache / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        out.append((bundle_format.Entry(role, p.name, rel, file_sha256(p), len(data)), p))
    return out


def _write(tmp_path: Path, name: str = "b") -> Path:
    rec = recipe.load(ROOT / "recipes")
    root = bundle.root_tar(ROOT, rec.source_date_epoch, ["build", "*.so"])
    bundle_format.write(tmp_path / name, "bundle-test", _files(tmp_path), root, {"steps": []},
                 bundle_format.RecipeRef("recipes/llvm", rec.version, rec.digest()))
    return tmp_path / name


def test_root_tar_is_deterministic_and_holds_only_the_checkout_data() -> None:
    rec = recipe.load(ROOT / "recipes")
    a = bundle.root_tar(ROOT, rec.source_date_epoch, ["build", "*.so"])
    assert a == bundle.root_tar(ROOT, rec.source_date_epoch, ["build", "*.so"])
    import io

    with tarfile.open(fileobj=io.BytesIO(a)) as t:
        names = t.getnames()
        assert all(m.mtime == rec.source_date_epoch and m.uid == 0 and not m.uname for m in t.getmembers())
    assert "recipes/llvm/conandata.yml" in names and "toolchain/toolchains.yml" in names
    assert any(n.startswith("src/compiler/") for n in names)
    assert names == sorted(names) and not any("__pycache__" in n for n in names)


def test_write_open_feed_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path)
    opened = bundle_format.open_layout(path)
    assert [e.role for e in opened.entries] == ["root", "plan", "pruned", "wheelhouse"]
    assert opened.recipe_digest == recipe.load(ROOT / "recipes").digest()
    bundle_format.feed(opened, tmp_path / "root", tmp_path / "fresh", lambda m: None)
    assert (tmp_path / "fresh" / "pruned/k/llvm-x.tar.xz").read_bytes() == b"pruned bytes"
    assert (tmp_path / "fresh" / "wheelhouse/cmake-4.4.4-py3-none-any.whl").read_bytes() == b"a wheel"
    assert recipe.load(tmp_path / "root" / "recipes").digest() == opened.recipe_digest
    # the same inputs give the same bundle digest
    again = bundle_format.open_layout(_write(tmp_path, "c"))
    assert again.manifest.digest == opened.manifest.digest


def test_a_changed_blob_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path)
    opened = bundle_format.open_layout(path)
    pruned = next(e for e in opened.entries if e.role == "pruned")
    blob = opened.layout.blob_path("sha256:" + pruned.sha256)
    blob.write_bytes(b"pruned bytez")
    with pytest.raises(VerifyError, match="does not match its digest"):
        bundle_format.open_layout(path)


def test_feed_admits_only_by_sha256_and_never_outside_the_cache(tmp_path: Path) -> None:
    path = _write(tmp_path)
    opened = bundle_format.open_layout(path)
    evil = [e if e.role != "pruned" else bundle_format.Entry(e.role, e.name, "../outside", e.sha256, e.size) for e in opened.entries]
    with pytest.raises(VerifyError, match="outside the cache"):
        bundle_format.feed(replace(opened, entries=tuple(evil)),
                    tmp_path / "root", tmp_path / "fresh", lambda m: None)
    lying = [e if e.role != "wheelhouse" else bundle_format.Entry(e.role, e.name, e.cache_path, "0" * 64, e.size)
             for e in opened.entries]
    with pytest.raises((SourceError, FileNotFoundError)):
        bundle_format.feed(replace(opened, entries=tuple(lying)),
                    tmp_path / "root2", tmp_path / "fresh2", lambda m: None)
    assert not (tmp_path / "fresh2" / "wheelhouse" / "cmake-4.4.4-py3-none-any.whl").exists()


def test_a_recipe_other_than_the_one_named_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path)
    opened = bundle_format.open_layout(path)
    with pytest.raises(VerifyError, match="not the one it names"):
        bundle_format.feed(bundle_format.Opened(opened.layout, opened.manifest, opened.name, "ab" * 32, opened.entries,
                                  opened.llvm_recipe, opened.llvm_version), tmp_path / "root", tmp_path / "fresh",
                    lambda m: None)


def test_not_a_bundle(tmp_path: Path) -> None:
    from hermetic.oci.image import ImageSpec, write_image

    (tmp_path / "t" / "usr").mkdir(parents=True)
    (tmp_path / "t" / "usr" / "f").write_text("x")
    spec = ImageSpec(variant="v", version="1", prefix="/usr", install_root=tmp_path / "t", epoch=1, arch="amd64",
                     os="linux", recipe={}, sources=(), tree_digest="")
    layout = write_image(spec, tmp_path / "img").layout
    with pytest.raises(UsageError, match="not a hermetic bundle"):
        bundle_format.open_layout(layout)
    assert json.loads((layout / "index.json").read_text())["manifests"]


def test_a_signed_bundle_verifies_by_key(tmp_path: Path) -> None:
    from hermetic.attest import image_signatures, signature_check, signing
    from hermetic.core.errors import UnsignedError, UntrustedKeyError
    from hermetic.oci.layout import Layout

    path = _write(tmp_path)
    pairs = [signing.generate(tmp_path / n) for n in ("a", "b")]
    key = signing.load_signing_key(pairs[0][0])
    assert key is not None
    a, b = (signing.load_verify_key(pub) for _, pub in pairs)
    with pytest.raises(UnsignedError):
        signature_check.check_bundle(path, [a])
    image_signatures.sign_layout(Layout(path), key, "reg.example/bundles/support:1")
    assert signature_check.check_bundle(path, [a])[0].what == "bundle"
    with pytest.raises(UntrustedKeyError):
        signature_check.check_bundle(path, [b])


def test_a_build_from_a_bundle_uses_no_cache_of_the_user_s(tmp_path: Path) -> None:
    """Every input comes from the bundle's own cache, and zig's runtimes are built there too: the user's source
    cache is neither read nor written (test_llvm_second_release.py checks it stays empty on a real build)."""
    from hermetic.build import env
    from hermetic.model import toolchains
    from hermetic.model.settings import Settings

    opened = bundle_format.open_layout(_write(tmp_path))
    user = Settings(root=ROOT, cache_dir=tmp_path / "user-cache", work_dir=tmp_path / "work")
    got = bundle.settings_for(user, opened, tmp_path / "work" / "bundle", lambda m: None)
    assert got.cache_dir.is_relative_to(tmp_path / "work" / "bundle") and not got.use_urls and not got.mirrors
    tc = toolchains.select(toolchains.load(ROOT / "toolchain"), "zig")
    compiler = env.compiler_for(got, tc, tmp_path / "zig", tmp_path / "out")
    assert compiler.global_cache == got.cache_dir / "zig-global"
    assert not (tmp_path / "user-cache").exists()
