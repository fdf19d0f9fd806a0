"""Where image signatures live: beside the image in a layout, under `sha256-<hex>.sig` in a registry.

In a layout a signature manifest is one more referrer of the image (kind
`signature`), so it travels with the layout and never changes its digest. In
a registry it is the manifest containers/image looks up by tag for a policy
with `use-sigstore-attachments: true`; pushing merges its layers with those
already there, so every builder's signature of the same digest sits side by
side (what a policy with one `sigstoreSigned` requirement per key needs).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest.signing import ANN_SIGNATURE, MT_SIMPLESIGNING, sig_tag, sign_image
from hermetic.core.errors import RegistryError, VerifyError
from hermetic.oci import referrers
from hermetic.oci.layout import pick_root
from hermetic.oci.registry import DEFAULT_CHUNK, _Response
from hermetic.oci.types import INDEX_TYPES, MT_MANIFEST, Descriptor, canonical_json, sha256_digest

if TYPE_CHECKING:
    from hermetic.attest.signing import ImageSignature, SigningKey
    from hermetic.oci.layout import Layout
    from hermetic.oci.registry import RegistryClient

ANN_IDENTITY = "io.hermetic.signature.identity"
MAX_PAYLOAD = 1 << 16


def _push_small(client: RegistryClient, repo: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="hermetic-sig-") as tmp:
        path = Path(tmp) / "blob"
        path.write_bytes(data)
        client.push_blob(repo, Descriptor("application/octet-stream", sha256_digest(data), len(data)), path, DEFAULT_CHUNK)


def image_subjects(layout: Layout) -> list[Descriptor]:
    """What a signature of the layout's image covers: the manifest (or index) its tag names, and each platform's."""
    root = pick_root(layout)
    kids = layout.children(root) if root.media_type in INDEX_TYPES else []
    return [Descriptor(d.media_type, d.digest, d.size) for d in [root, *kids]]


def _layers(sigs: Iterable[ImageSignature], layout: Layout | None) -> list[dict[str, Any]]:
    out = []
    for s in sigs:
        digest = layout.put_bytes(s.payload) if layout is not None else sha256_digest(s.payload)
        out.append({"mediaType": MT_SIMPLESIGNING, "digest": digest, "size": len(s.payload),
                    "annotations": {ANN_SIGNATURE: s.signature_b64}})
    return out


def _manifest(layers: Sequence[dict[str, Any]], subject: Descriptor | None) -> dict[str, Any]:
    empty = referrers.EMPTY_JSON
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": referrers.MT_EMPTY, "digest": sha256_digest(empty), "size": len(empty)},
        "layers": list(layers),
    }
    if subject is not None:
        doc["artifactType"] = MT_SIMPLESIGNING
        doc["subject"] = {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size}
        doc["annotations"] = {referrers.ANN_KIND: referrers.KIND_SIGNATURE}
    return doc


def _merge(old: Sequence[ImageSignature], new: Sequence[ImageSignature]) -> list[ImageSignature]:
    seen = {(s.payload, s.signature_b64) for s in old}
    return [*old, *(s for s in new if (s.payload, s.signature_b64) not in seen)]


def in_layout(layout: Layout, digest: str) -> list[ImageSignature]:
    """The signatures of `digest` stored in the layout (blobs verified)."""
    out: list[ImageSignature] = []
    for r in referrers.referrers(layout, subject=digest):
        if r.kind != referrers.KIND_SIGNATURE:
            continue
        where = r.digest
        out += _read(r.manifest, lambda d, where=where: layout.read_blob(Descriptor.from_json(d, where)))
    return out


def _read(manifest: dict[str, Any], read: Any) -> list[ImageSignature]:
    from hermetic.attest.signing import signatures_of_manifest

    return signatures_of_manifest(manifest, read)


def sign_layout(layout: Layout, key: SigningKey, identity: str) -> list[Descriptor]:
    """Sign the layout's image (and each platform's manifest) as `identity` (REGISTRY/REPO:TAG); kept beside it."""
    subjects = image_subjects(layout)
    layout.put_bytes(referrers.EMPTY_JSON)
    for subject in subjects:
        sigs = _merge(in_layout(layout, subject.digest), [sign_image(key, identity, subject.digest)])
        manifest = _manifest(_layers(sigs, layout), subject)
        manifest["annotations"][ANN_IDENTITY] = identity
        referrers.add_manifest(layout, manifest)
    return subjects


# -- in a registry ---------------------------------------------------------------------------------------------


def in_registry(client: RegistryClient, repo: str, digest: str) -> list[ImageSignature]:
    """The signatures under `sha256-<hex>.sig` in the repository (each blob checked against its digest)."""
    resp = client.request("GET", f"/v2/{repo}/manifests/{sig_tag(digest)}", headers={"Accept": MT_MANIFEST},
                          ok=(200, 404), scopes=[f"repository:{repo}:pull"])
    assert isinstance(resp, _Response)
    if resp.status == 404:
        return []
    try:
        manifest = json.loads(resp.body)
    except ValueError as exc:
        raise RegistryError(f"{repo}:{sig_tag(digest)} is not JSON", str(exc), "") from exc

    def read(d: dict[str, Any]) -> bytes:
        desc = Descriptor.from_json(d, sig_tag(digest))
        if desc.size > MAX_PAYLOAD:
            raise VerifyError(f"a signature payload in {repo} is {desc.size} bytes", "payloads are small JSON", "")
        with tempfile.TemporaryDirectory(prefix="hermetic-sig-") as tmp:
            client.fetch_blob(repo, desc, Path(tmp) / "payload")  # checked against its digest on the way
            return (Path(tmp) / "payload").read_bytes()

    return _read(manifest, read)


@dataclass(frozen=True)
class PushedSignatures:
    subject: str
    tag: str
    count: int


def push(client: RegistryClient, repo: str, subject: str, sigs: Sequence[ImageSignature]) -> PushedSignatures:
    """Add signatures to the subject's `.sig` manifest in the registry (those already there are kept)."""
    merged = _merge(in_registry(client, repo, subject), sigs)
    empty = referrers.EMPTY_JSON
    for data in (empty, *(s.payload for s in sigs)):
        _push_small(client, repo, data)
    body = canonical_json(_manifest(_layers(merged, None), None))
    client.put_manifest(repo, sig_tag(subject), MT_MANIFEST, body)
    return PushedSignatures(subject, sig_tag(subject), len(merged))


def push_from_layout(
    client: RegistryClient, layout: Layout, repo: str, subjects: Iterable[str], identity: str
) -> list[PushedSignatures]:
    """The layout's signatures that name `identity` (those made for another destination would be refused there)."""
    out = []
    for subject in subjects:
        sigs = [s for s in in_layout(layout, subject) if s.claims[0] == identity]
        if sigs:
            out.append(push(client, repo, subject, sigs))
    return out


def pull_into_layout(client: RegistryClient, repo: str, digest: str, layout: Layout, subject: Descriptor) -> int:
    """The registry's signatures of `digest` kept in the layout beside the image; returns how many."""
    sigs = in_registry(client, repo, digest)
    if sigs:
        layout.put_bytes(referrers.EMPTY_JSON)
        referrers.add_manifest(layout, _manifest(_layers(_merge(in_layout(layout, digest), sigs), layout), subject))
    return len(sigs)
