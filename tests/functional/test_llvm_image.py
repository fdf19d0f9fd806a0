"""The image of a real LLVM build: what only LLVM's image says (its licence and upstream in the SBOM and the
labels), and containers/llvm.Containerfile, which copies an LLVM tree. Everything else about images runs on the
tiny recipe (tests/integration/test_oci_*.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devtools.buildah import buildah_mount, buildah_store, run
from helpers import ROOT, hermetic
from hermetic.attest import sbom
from hermetic.model.record import load_build_record, scan_tree, tree_digest
from hermetic.oci import referrers
from hermetic.oci.layout import Layout, pick_root


@pytest.fixture(scope="module")
def image(zig_support_install: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("llvm-image") / "llvm-support"
    hermetic("image", "llvm", "--record", str(zig_support_install), "--output", str(out), "--quiet")
    return out


def test_the_image_says_llvm_s_licence_and_upstream(image: Path) -> None:
    docs = {r.kind: json.loads(r.read()) for r in referrers.referrers(Layout(image))}
    tree = sbom.find_component(docs["sbom"], "llvm-tree")
    assert {lic["expression"] for lic in tree["licenses"]} == {"Apache-2.0 WITH LLVM-exception"}
    layout = Layout(image)
    manifest = layout.read_json(pick_root(layout))
    labels = json.loads(layout.blob_path(manifest["config"]["digest"]).read_text())["config"]["Labels"]
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0 WITH LLVM-exception"
    assert labels["org.opencontainers.image.source"] == "https://github.com/llvm/llvm-project"
    assert labels["org.opencontainers.image.revision"] == "llvmorg-19.1.7"


def test_llvm_containerfile_copies_the_same_tree(zig_support_install: Path, image: Path, tmp_path: Path) -> None:
    """containers/llvm.Containerfile gives the same tree, but (as it documents) not our digest."""
    record = load_build_record(zig_support_install)
    prefix = record.prefix.strip("/")
    with buildah_store(tmp_path) as store:
        run(
            "buildah", *store, "bud", "--isolation", "chroot", "--build-arg", f"VARIANT={record.variant}",
            "-t", "localhost/llvm", "-f", str(ROOT / "containers/llvm.Containerfile"), str(record.install_root),
        )  # fmt: skip
        root = buildah_mount(store, "localhost/llvm")
        assert tree_digest(scan_tree(root / prefix)) == tree_digest(scan_tree(Path(record.install_root) / prefix))
        out = tmp_path / "oci"
        run("buildah", *store, "push", "localhost/llvm", f"oci:{out}:llvm")
        assert Layout(out).index()[0].digest != Layout(image).index()[0].digest
