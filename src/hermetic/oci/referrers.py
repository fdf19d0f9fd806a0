"""OCI referrers: artifacts (SBOM, provenance) whose `subject` is an image manifest.

In a layout they live beside the image, never inside it: their blobs go to
blobs/sha256 and their descriptors to `referrers.json` (an image index, the
shape the referrers API answers with), while index.json keeps naming the
image alone, so tools that read the layout see one image and its digest
never changes.

In a registry they are pushed as image manifests with a `subject`. A registry
that implements the referrers API (OCI distribution 1.1) says so with an
`OCI-Subject` header and indexes them itself; for one that does not (Debian's
docker-registry 2.8), the client keeps the index under the tag `sha256-<hex>`
of the subject, the distribution spec's tag-schema fallback. Discovery asks
the API first and falls back to that tag when the registry answers 404.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hermetic.core.errors import VerifyError
from hermetic.oci.types import (
    MT_INDEX,
    MT_MANIFEST,
    Descriptor,
    canonical_json,
    parse_json,
    sha256_digest,
    split_digest,
)

MT_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
REFERRERS_FILE = "referrers.json"
ANN_TITLE = "org.opencontainers.image.title"
ANN_CREATED = "org.opencontainers.image.created"
ANN_KIND = "io.hermetic.attestation"
ANN_PREDICATE = "in-toto.io/predicate-type"
KIND_SIGNATURE = "signature"
VIA_API = "referrers-api"
VIA_TAG = "tag-schema"


def fallback_tag(digest: str) -> str:
    """The tag-schema fallback tag of a subject: `sha256:abc…` → `sha256-abc…`."""
    algo, hexpart = split_digest(digest)
    return f"{algo}-{hexpart}"


@dataclass(frozen=True)
class Referrer:
    """One artifact in a layout: its manifest descriptor, the manifest, and where its payload lies."""

    descriptor: dict[str, Any]  # mediaType, digest, size, artifactType, annotations
    manifest: dict[str, Any]
    payload: Path

    @property
    def digest(self) -> str:
        return str(self.descriptor["digest"])

    @property
    def artifact_type(self) -> str:
        return str(self.descriptor.get("artifactType", ""))

    @property
    def subject(self) -> str:
        return str((self.manifest.get("subject") or {}).get("digest", ""))

    @property
    def kind(self) -> str:
        return str((self.descriptor.get("annotations") or {}).get(ANN_KIND, ""))

    def read(self) -> bytes:
        return self.payload.read_bytes()


# -- in a layout -----------------------------------------------------------------------------------------


class Store(Protocol):
    """The image layout whose referrers these are: what this module calls of oci.layout.Layout, which is
    the callers' (it sits above this module, on oci.http)."""

    path: Path

    def blob_path(self, digest: str) -> Path: ...

    def put_bytes(self, data: bytes) -> str: ...

    def read_json(self, desc: Descriptor) -> dict[str, Any]: ...

    def verify_blob_file(self, desc: Descriptor) -> Path: ...

    def children(self, desc: Descriptor) -> list[Descriptor]: ...


def _index_path(layout: Store) -> Path:
    return layout.path / REFERRERS_FILE


def _entries(layout: Store) -> list[dict[str, Any]]:
    path = _index_path(layout)
    if not path.is_file():
        return []
    fix = "attest the image again (`hermetic attest LAYOUT`)"
    try:
        data = parse_json(path.read_bytes(), str(path), fix)
    except OSError as exc:
        raise VerifyError(f"{path} is unreadable", str(exc), fix) from exc
    manifests = data.get("manifests") if isinstance(data, dict) else None
    if not isinstance(manifests, list):
        raise VerifyError(f"{path} is damaged", "it has no manifests list", fix)
    return [dict(m) for m in manifests if isinstance(m, dict)]


def _write_entries(layout: Store, entries: Sequence[Mapping[str, Any]]) -> None:
    ordered = sorted(entries, key=lambda e: (str(e.get("artifactType", "")), str(e.get("digest", ""))))
    index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [dict(e) for e in ordered]}
    tmp = layout.path / f".{REFERRERS_FILE}.tmp{os.getpid()}"
    tmp.write_bytes(json.dumps(index, indent=2, sort_keys=True).encode() + b"\n")
    os.replace(tmp, _index_path(layout))


def _descriptor(manifest: Mapping[str, Any], data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"mediaType": MT_MANIFEST, "digest": sha256_digest(data), "size": len(data)}
    if manifest.get("artifactType"):
        out["artifactType"] = manifest["artifactType"]
    if manifest.get("annotations"):
        out["annotations"] = dict(manifest["annotations"])
    return out


def attach(
    layout: Store,
    subject: Descriptor,
    artifact_type: str,
    payload: bytes,
    filename: str,
    annotations: Mapping[str, str],
) -> Referrer:
    """Store an artifact about `subject` in the layout; replaces an earlier one of the same kind and subject."""
    layout.put_bytes(EMPTY_JSON)
    payload_digest = layout.put_bytes(payload)
    layer_ann = {ANN_TITLE: filename}
    if ANN_PREDICATE in annotations:
        layer_ann[ANN_PREDICATE] = annotations[ANN_PREDICATE]
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": MT_EMPTY, "digest": sha256_digest(EMPTY_JSON), "size": len(EMPTY_JSON)},
        "layers": [{"mediaType": artifact_type, "digest": payload_digest, "size": len(payload), "annotations": layer_ann}],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size},
        "annotations": dict(annotations),
    }
    return add_manifest(layout, manifest)


def add_manifest(layout: Store, manifest: Mapping[str, Any]) -> Referrer:
    """Store an artifact manifest (its blobs already in the layout) and index it; replaces one of its kind and subject."""
    data = canonical_json(manifest)
    layout.put_bytes(data)
    desc = _descriptor(manifest, data)
    kind = str((manifest.get("annotations") or {}).get(ANN_KIND, ""))
    subject = str((manifest.get("subject") or {}).get("digest", ""))
    keep = [r.descriptor for r in referrers(layout) if not (r.subject == subject and r.kind == kind and kind)]
    _write_entries(layout, [*keep, desc])
    first = Descriptor.from_json((manifest.get("layers") or [])[0], desc["digest"])
    return Referrer(desc, dict(manifest), layout.blob_path(first.digest))


def referrers(layout: Store, subject: str | None = None, artifact_type: str | None = None) -> list[Referrer]:
    """The artifacts stored in the layout (about `subject` and of `artifact_type` when given), verified."""
    out = []
    for entry in _entries(layout):
        desc = Descriptor.from_json(entry, str(_index_path(layout)))
        manifest = layout.read_json(desc)
        layers = manifest.get("layers") or []
        if not layers:
            raise VerifyError(f"artifact {desc.digest} in {layout.path} has no payload", "", "attest the image again")
        payload = Descriptor.from_json(layers[0], desc.digest)
        ref = Referrer(entry, manifest, layout.verify_blob_file(payload))
        if subject and ref.subject != subject:
            continue
        if artifact_type and ref.artifact_type != artifact_type:
            continue
        out.append(ref)
    return out


def copy_referrers(src: Store, dest: Store, subject: str) -> list[Referrer]:
    """Copy the artifacts about `subject` (verified on reading) and their blobs from one layout into another."""
    found = referrers(src, subject=subject)
    for ref in found:
        desc = Descriptor.from_json(ref.descriptor, str(_index_path(src)))
        for blob in [desc, *src.children(desc)]:
            target = dest.blob_path(blob.digest)
            if not target.exists():
                shutil.copyfile(src.blob_path(blob.digest), target)
    if found:
        digests = {r.digest for r in found}
        kept = [e for e in _entries(dest) if e.get("digest") not in digests]
        _write_entries(dest, [*kept, *(r.descriptor for r in found)])
    return found


# -- in a registry ---------------------------------------------------------------------------------------


