"""The in-toto project's own verifier (`in-toto-verify`, PyPI in-toto, pinned) on our links and layout: green on a
good build; red on a changed byte in the tree, a replaced SBOM, a link signed by another key; k of n builders.

The build is the tiny recipe's (a real Conan build through hermetic, in seconds), its image written and attested
with a key by `hermetic image llvm`; the chain ending in a wheel uses the small real-shaped wheel of
tests/schemas/examples.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import ROOT, hermetic, in_toto_verify, swap_in_tampered_image
from hermetic.attest import attach as attest
from hermetic.attest.signing import load_verify_key
from hermetic.model import recipe
from hermetic.model.options import resolve
from schemas.examples import fake_image, fake_llvm_build

pytestmark = pytest.mark.integration


def _build(base: Path, key: Path, tiny: tuple[str, ...], cache: Path) -> tuple[Path, Path]:
    """A tiny build of its own, its image written, attested and signed with key: (record, image layout)."""
    hermetic("build", "llvm", *tiny, "--variant", "support", "--toolchain", "host", "--work-dir", str(base),
             "--cache", str(cache), "--quiet")
    rec = next(base.rglob("record.json"))
    hermetic("image", "llvm", "--llvm-recipe", tiny[1], "--record", str(rec), "--output", str(base / "image"),
             "--sign-key", str(key), "--work-dir", str(base), "--quiet")
    return rec, base / "image"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("keys")
    for name in ("owner", "a", "b"):
        hermetic("key", "generate", str(base / name), "--no-gpg", "--quiet")
    return base


@pytest.fixture(scope="module")
def good(keys: Path, tiny: tuple[str, ...], source_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The evidence of one builder (a), in a layout the owner signed."""
    base = tmp_path_factory.mktemp("intoto")
    rec, image = _build(base / "a", keys / "a.key", tiny, source_cache)
    ev = base / "evidence"
    hermetic("intoto", "links", str(ev), "--llvm-recipe", tiny[1], "--record", str(rec), "--image", str(image),
             "--sign-key", str(keys / "a.key"))
    hermetic("intoto", "layout", str(ev), "--builder", str(keys / "a.pub"), "--sign-key", str(keys / "owner.key"))
    return ev


def _copy(ev: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "evidence"
    shutil.copytree(ev, dest)
    return dest


def test_in_toto_verify_passes_on_a_good_build(good: Path, keys: Path, tmp_path: Path) -> None:
    ev = _copy(good, tmp_path)
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = sorted(p.name.split(".")[0] for p in (ev / "links").glob("*.link"))
    assert names == ["attest", "build", "fetch", "image", "prune"]
    # the inspection really unpacked the image: the tree is there, byte for byte the build's products
    build = json.loads(next((ev / "links").glob("build.*.link")).read_text())["signed"]["products"]
    assert build and all((ev / "unpacked" / p).is_file() for p in build)


def test_a_changed_byte_in_the_tree_fails(good: Path, keys: Path, tmp_path: Path) -> None:
    """The image rewritten, consistently, from a tree with one byte changed: not what the build step made."""
    ev = _copy(good, tmp_path)
    swap_in_tampered_image(next((good.parent / "a").rglob("record.json")), ev, tmp_path)
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "RuleVerificationError" in proc.stderr and "image" in proc.stderr, proc.stderr


def test_a_replaced_sbom_fails(good: Path, keys: Path, tmp_path: Path) -> None:
    ev = _copy(good, tmp_path)
    sbom = next((ev / "attestations").glob("*sbom.cdx.json"))
    doc = json.loads(sbom.read_text())
    doc["components"] = doc["components"][1:]  # a component dropped: still a well-formed SBOM
    sbom.write_text(json.dumps(doc))
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 1 and "RuleVerificationError" in proc.stderr, proc.stdout + proc.stderr
    assert "attestations/" in proc.stderr


def test_a_link_signed_by_another_key_fails(
    good: Path, keys: Path, tiny: tuple[str, ...], source_cache: Path, tmp_path: Path
) -> None:
    ev = _copy(good, tmp_path)
    rec, image = _build(tmp_path / "b", keys / "b.key", tiny, source_cache)
    other = tmp_path / "other"
    hermetic("intoto", "links", str(other), "--llvm-recipe", tiny[1], "--record", str(rec), "--image", str(image),
             "--links-only", "--sign-key", str(keys / "b.key"))
    (ev / "links" / next((ev / "links").glob("build.*.link")).name).write_bytes(
        next((other / "links").glob("build.*.link")).read_bytes())
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "SignatureVerificationError" in proc.stderr or "ThresholdVerificationError" in proc.stderr, proc.stderr


def test_a_layout_signed_by_another_key_fails(good: Path, keys: Path, tmp_path: Path) -> None:
    ev = _copy(good, tmp_path)
    proc = in_toto_verify(ev, keys / "a.pub")
    assert proc.returncode == 1 and "SignatureVerificationError" in proc.stderr, proc.stdout + proc.stderr


def test_two_of_two_builders(keys: Path, tiny: tuple[str, ...], source_cache: Path, tmp_path: Path) -> None:
    """Builders a and b each build the same tree and image; the layout asks both for every reproducible step."""
    ev = tmp_path / "evidence"
    for name in ("a", "b"):
        rec, image = _build(tmp_path / name, keys / f"{name}.key", tiny, source_cache)
        hermetic("intoto", "links", str(ev), "--llvm-recipe", tiny[1], "--record", str(rec), "--image", str(image),
                 "--sign-key", str(keys / f"{name}.key"), *(["--links-only"] if name == "b" else []))
    hermetic("intoto", "layout", str(ev), "--builder", str(keys / "a.pub"), "--builder", str(keys / "b.pub"),
             "--threshold", "2", "--sign-key", str(keys / "owner.key"))
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # one builder's word is not enough: without b's build link the step has 1 of the 2 links it needs
    (ev / "links" / f"build.{load_verify_key(keys / 'b.pub').keyid[:8]}.link").unlink()
    shutil.rmtree(ev / "unpacked")
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 1 and "requires '2' link metadata file(s), found '1'" in proc.stderr, proc.stderr


def test_the_chain_ending_in_a_wheel(keys: Path, tmp_path: Path) -> None:
    from hermetic.model import record
    from schemas.examples import fake_wheel

    # the small real-shaped build of tests/schemas/examples.py: its wheel record can name it
    rec_path = fake_llvm_build(tmp_path / "a", recipe_digest=recipe.load(ROOT / "recipes").digest())
    image = fake_image(rec_path, tmp_path / "a" / "image")
    signed = resolve({"root": str(ROOT), "work_dir": str(tmp_path / "w"), "sign_key": str(keys / "a.key")}, {}, tmp_path)
    attest.attest_image(signed, image, rec_path)
    rec = record.load_build_record(rec_path)
    ref = {"path": str(rec_path), "variant": "support", "inputs_digest": rec.inputs_digest, "tree_digest": rec.tree.digest}
    wheel = fake_wheel(tmp_path / "dist", llvm_prefix=rec.install_root + rec.prefix, llvm_record=ref)
    settings = resolve({"root": str(ROOT), "work_dir": str(tmp_path / "work"), "sign_key": str(keys / "a.key")}, {}, tmp_path)
    attest.attest_wheel(settings, wheel)
    ev = tmp_path / "evidence"
    hermetic("intoto", "links", str(ev), "--record", str(rec_path), "--image", str(image), "--wheel", str(wheel),
             "--sign-key", str(keys / "a.key"))
    hermetic("intoto", "layout", str(ev), "--builder", str(keys / "a.pub"), "--wheel", "--sign-key", str(keys / "owner.key"))
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (ev / "dist" / wheel.name).is_file() and any((ev / "attestations").glob(wheel.name + ".cdx.dsse.json"))
    (ev / "dist" / wheel.name).write_bytes(wheel.read_bytes() + b"\0")  # a changed wheel
    shutil.rmtree(ev / "unpacked")
    proc = in_toto_verify(ev, keys / "owner.pub")
    assert proc.returncode == 1 and "dist/" in proc.stderr, proc.stdout + proc.stderr
