"""The image of a build: its layer, config and manifest written from the build record into an image layout."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.core import times
from hermetic.core.errors import HermeticError, VerifyError
from hermetic.core.staging import staged_dir
from hermetic.model.record import load_build_record
from hermetic.oci.layer import write_layer
from hermetic.oci.layout import Layout, _replace_dir, pick_root
from hermetic.oci.types import LABEL_PREFIX, MT_CONFIG, MT_MANIFEST, REF_NAME, Descriptor, canonical_json, host_arch

if TYPE_CHECKING:
    from hermetic.model.record import BuildRecord
    from hermetic.oci.layer import LayerInfo

LLVM_SOURCE_URL = "https://github.com/llvm/llvm-project"


LLVM_LICENSE = "Apache-2.0 WITH LLVM-exception"


@dataclass(frozen=True)
class ImageSpec:
    """Everything that goes into an LLVM image; parsed once from a build record."""

    variant: str
    version: str
    prefix: str  # "/usr/lib64/<recipe>-<variant>-<version>"
    install_root: Path
    epoch: int
    arch: str
    os: str
    recipe: Mapping[str, str]
    sources: tuple[tuple[str, str], ...]  # (file, sha256)
    tree_digest: str
    pruned: str = ""

    @property
    def title(self) -> str:
        return f"{self.recipe.get('name', 'llvm')}-{self.variant}-{self.version}"

    @property
    def name(self) -> str:
        return f"{self.title}-{self.os}-{self.arch}"

    def labels(self) -> dict[str, str]:
        labels = {
            "org.opencontainers.image.title": self.title,
            "org.opencontainers.image.version": self.version,
        }
        if self.recipe.get("name", "llvm") == "llvm":
            # LLVM's upstream and licence; a build record names no such thing for another recipe (the tests' tiny)
            labels |= {
                "org.opencontainers.image.source": LLVM_SOURCE_URL,
                "org.opencontainers.image.revision": f"llvmorg-{self.version}",
                "org.opencontainers.image.licenses": LLVM_LICENSE,
            }
        labels |= {
            "org.opencontainers.image.created": times.iso(self.epoch),
            LABEL_PREFIX + "recipe": self.recipe.get("name", "llvm"),
            LABEL_PREFIX + "recipe.version": self.recipe.get("version", self.version),
            LABEL_PREFIX + "recipe.digest": self.recipe.get("digest", ""),
            LABEL_PREFIX + "variant": self.variant,
            LABEL_PREFIX + "prefix": self.prefix,
            LABEL_PREFIX + "tree.digest": self.tree_digest,
        }
        if self.pruned:
            labels[LABEL_PREFIX + "pruned.digest"] = "sha256:" + self.pruned.removeprefix("sha256:")
        for file, sha in self.sources:
            labels[LABEL_PREFIX + "source." + file] = "sha256:" + sha.removeprefix("sha256:")
        return labels


def spec_from_record(record_path: Path, arch: str | None = None) -> ImageSpec:
    rec = load_build_record(record_path)
    recipe = {"name": rec.recipe.name, "version": rec.recipe.version, "digest": rec.recipe.digest}
    variant = rec.variant
    prefix = "/" + rec.prefix.strip("/")
    epoch = rec.source_date_epoch
    install_root = Path(rec.install_root)
    tree = rec.tree.digest
    sources = tuple(sorted((s.file, s.sha256) for s in rec.sources))
    if not install_root.is_absolute():
        install_root = (record_path.parent / install_root).resolve()
    version = recipe.get("version") or prefix.rsplit("-", 1)[-1]
    expected = f"/usr/lib64/{recipe['name']}-{variant}-{version}"
    if prefix != expected:
        raise VerifyError(
            f"unexpected prefix {prefix} in {record_path}", f"images hold {expected}", "rebuild the variant"
        )
    return ImageSpec(
        variant=variant,
        version=version,
        prefix=prefix,
        install_root=install_root,
        epoch=epoch,
        arch=arch or rec.arch or host_arch(),  # a record without arch predates cross builds: this machine's
        os="linux",
        recipe=recipe,
        sources=sources,
        tree_digest=tree,
        pruned=rec.pruned.sha256 if rec.pruned else "",
    )


@dataclass(frozen=True)
class ImageResult:
    layout: Path
    manifest: Descriptor
    config_digest: str
    layer: LayerInfo
    name: str
    seconds: float


def write_image(spec: ImageSpec, output: Path, compression: str = "gzip") -> ImageResult:
    """Write the layout into a temp dir beside `output`, then move it into place."""
    import time

    start = time.monotonic()
    output = output.resolve()
    with staged_dir(output, _replace_dir) as tmpdir:
        layout = Layout(tmpdir)
        layout.init()
        tmp_layer = tmpdir / "blobs" / "sha256" / ".layer.tmp"
        with open(tmp_layer, "wb") as f:
            layer = write_layer(f, spec.install_root, spec.prefix, spec.epoch, compression)
        os.replace(tmp_layer, layout.blob_path(layer.digest))
        labels = spec.labels()
        created = times.iso(spec.epoch)
        config = {
            "architecture": spec.arch,
            "os": spec.os,
            "created": created,
            "config": {"Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
            "history": [{"created": created, "created_by": f"hermetic image llvm --variant {spec.variant}"}],
        }
        config_bytes = canonical_json(config)
        config_digest = layout.put_bytes(config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "digest": config_digest, "size": len(config_bytes)},
            "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}],
            "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")},
        }
        manifest_bytes = canonical_json(manifest)
        desc = Descriptor(
            MT_MANIFEST,
            layout.put_bytes(manifest_bytes),
            len(manifest_bytes),
            platform={"architecture": spec.arch, "os": spec.os},
            annotations={REF_NAME: spec.name},
        )
        layout.write_index([desc])
    return ImageResult(output, desc, config_digest, layer, spec.name, time.monotonic() - start)


def kept_image(rec: BuildRecord, layout_dir: Path, compression: str) -> Descriptor | None:
    """The image a substitution pulled, when it is still whole at layout_dir and is what would be written now.

    Reusing it keeps the digest the substitute published (with its attestations, made where it was
    built) instead of writing and attesting the image again here.
    """
    if not rec.substituted or not (layout_dir / "oci-layout").is_file():
        return None
    want = rec.substituted.rpartition("@")[2]
    try:
        layout = Layout(layout_dir)
        root = pick_root(layout)
        if root.digest != want:
            return None
        layout.verify(root)
        layers = layout.children(root)[1:]
    except HermeticError:
        return None
    if any(("zstd" in d.media_type) != (compression == "zstd") for d in layers):
        return None
    return root
