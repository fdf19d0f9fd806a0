"""Multi-platform images: per-platform layouts merged into one OCI image index.

Apart from layout.py because an index also carries each platform image's attestations, which
live in referrers.py (which itself builds on layout.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hermetic.core.errors import UsageError
from hermetic.core.staging import staged_dir
from hermetic.oci import referrers
from hermetic.oci.layout import Layout, _replace_dir, fill_blobs
from hermetic.oci.types import MANIFEST_TYPES, MT_INDEX, REF_NAME, Descriptor, canonical_json


def merge_layouts(layouts: Iterable[Path], output: Path) -> Descriptor:
    """One multi-platform index over the per-platform images of several layouts, with each image's
    attestations (its referrers: SBOM, provenance), so that a push of the index publishes them too."""
    per_platform: dict[tuple[str, str], tuple[Layout, Descriptor]] = {}
    titles: set[str] = set()
    for path in layouts:
        layout = Layout(path)
        for entry in layout.index():
            layout.verify(entry)
            items = [entry] if entry.media_type in MANIFEST_TYPES else layout.children(entry)
            for item in items:
                if item.media_type not in MANIFEST_TYPES:
                    raise UsageError(f"{path} holds a nested index", "only per-platform images can be merged", "pass the layouts of single-platform images (hermetic image llvm)")
                plat = item.platform or _platform_of(layout, item)
                key = (plat.get("os", "linux"), plat.get("architecture", ""))
                title = str(layout.read_json(item).get("annotations", {}).get("org.opencontainers.image.title", ""))
                titles.add(title)
                prev = per_platform.get(key)
                if prev and prev[1].digest != item.digest:
                    raise UsageError(
                        f"two different {key[0]}/{key[1]} images",
                        f"{prev[1].digest} in {prev[0].path} and {item.digest} in {path}",
                        "pass one layout per platform",
                    )
                per_platform[key] = (
                    layout,
                    Descriptor(
                        item.media_type, item.digest, item.size, platform={"architecture": key[1], "os": key[0]}
                    ),
                )
    if not per_platform:
        raise UsageError("no images to merge", "", "pass at least one layout written by `hermetic image llvm`")
    if len(titles) > 1:
        raise UsageError(
            "the layouts hold different images", ", ".join(sorted(titles)), "merge layouts of one variant and version"
        )
    title = titles.pop() or "image"
    output = output.resolve()
    with staged_dir(output, _replace_dir) as tmpdir:
        out = Layout(tmpdir)
        out.init()
        manifests = []
        for key in sorted(per_platform):
            src, desc = per_platform[key]
            fill_blobs(out, src, desc)
            manifests.append(desc)
            referrers.copy_referrers(src, out, desc.digest)
        index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [d.as_json() for d in manifests]}
        index_bytes = canonical_json(index)
        root = Descriptor(MT_INDEX, out.put_bytes(index_bytes), len(index_bytes), annotations={REF_NAME: title})
        out.write_index([root])
        out.verify()
    return root


def _platform_of(layout: Layout, manifest: Descriptor) -> dict[str, str]:
    doc = layout.read_json(manifest)
    config = layout.read_json(Descriptor.from_json(doc["config"], manifest.digest))
    return {"architecture": str(config.get("architecture", "")), "os": str(config.get("os", "linux"))}
