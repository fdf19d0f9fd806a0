"""Referrers in a registry: found through the referrers API or the tag-schema fallback, pushed and pulled."""

from __future__ import annotations

import json
import urllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermetic.core.errors import RegistryError, VerifyError
from hermetic.oci.referrers import (
    KIND_SIGNATURE,
    REFERRERS_FILE,
    VIA_API,
    VIA_TAG,
    _descriptor,
    _entries,
    _write_entries,
    fallback_tag,
    referrers,
)
from hermetic.oci.registry import DEFAULT_CHUNK, _Response
from hermetic.oci.types import MT_INDEX, MT_MANIFEST, Descriptor, canonical_json, sha256_digest, split_digest

if TYPE_CHECKING:
    from hermetic.oci.layout import Layout
    from hermetic.oci.referrers import Referrer
    from hermetic.oci.registry import RegistryClient


@dataclass(frozen=True)
class Pushed:
    digest: str
    artifact_type: str
    subject: str
    via: str  # VIA_API or VIA_TAG


def _get_optional(client: RegistryClient, repo: str, path: str, accept: str) -> _Response | None:
    resp = client.request(
        "GET", f"/v2/{repo}/{path}", headers={"Accept": accept}, ok=(200, 400, 404, 405, 501),
        scopes=[f"repository:{repo}:pull"],
    )
    assert isinstance(resp, _Response)
    return resp if resp.status == 200 else None


def _index_manifests(body: bytes, where: str) -> list[dict[str, Any]]:
    try:
        doc = json.loads(body)
        manifests = doc["manifests"] if isinstance(doc, dict) else None
    except (ValueError, KeyError) as exc:
        raise RegistryError(f"{where} is not an image index", str(exc), "the registry serves damaged data; push the attestations again") from exc
    if not isinstance(manifests, list):
        raise RegistryError(f"{where} is not an image index", "it has no manifests list", "the registry serves damaged data; push the attestations again")
    return [dict(m) for m in manifests if isinstance(m, dict)]


def list_referrers(
    client: RegistryClient, repo: str, subject: str, artifact_type: str | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Descriptors of the artifacts about `subject` in the registry, and how they were found."""
    query = "?" + urllib.parse.urlencode({"artifactType": artifact_type}) if artifact_type else ""
    resp = _get_optional(client, repo, f"referrers/{subject}{query}", MT_INDEX)
    if resp is not None and resp.header("Content-Type").split(";")[0].strip() == MT_INDEX:
        found, via = _index_manifests(resp.body, f"the referrers of {subject}"), VIA_API
        # a registry may ignore the filter; it says so in OCI-Filters-Applied
        if artifact_type and "artifactType" in resp.header("OCI-Filters-Applied"):
            return found, via
    else:
        tag = fallback_tag(subject)
        resp = _get_optional(client, repo, f"manifests/{tag}", MT_INDEX)
        found, via = (_index_manifests(resp.body, f"{repo}:{tag}") if resp is not None else []), VIA_TAG
    if artifact_type:
        found = [m for m in found if m.get("artifactType") == artifact_type]
    return found, via


def _add_to_fallback(client: RegistryClient, repo: str, subject: str, desc: Mapping[str, Any]) -> None:
    tag = fallback_tag(subject)
    resp = _get_optional(client, repo, f"manifests/{tag}", MT_INDEX)
    manifests = _index_manifests(resp.body, f"{repo}:{tag}") if resp is not None else []
    if any(m.get("digest") == desc["digest"] for m in manifests):
        return
    index = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": [*manifests, dict(desc)]}
    client.put_manifest(repo, tag, MT_INDEX, canonical_json(index))


def push_referrers(
    client: RegistryClient,
    layout: Layout,
    repo: str,
    subjects: Iterable[str],
    chunk_size: int = DEFAULT_CHUNK,
) -> list[Pushed]:
    """Push the layout's artifacts about `subjects` (already pushed images) to `repo`."""
    wanted = set(subjects)
    out = []
    for ref in referrers(layout):
        if ref.subject not in wanted or ref.kind == KIND_SIGNATURE:
            continue  # signatures go under their own tag (image_signatures.push_signatures)
        desc = Descriptor.from_json(ref.descriptor, REFERRERS_FILE)
        for blob in layout.children(desc):
            client.push_blob(repo, blob, layout.blob_path(blob.digest), chunk_size)
        answered = client.put_manifest(repo, desc.digest, MT_MANIFEST, layout.read_blob(desc))
        if answered == ref.subject:
            via = VIA_API
        else:
            _add_to_fallback(client, repo, ref.subject, ref.descriptor)
            via = VIA_TAG
        out.append(Pushed(desc.digest, ref.artifact_type, ref.subject, via))
    return out


def pull_referrers(
    client: RegistryClient, repo: str, subject: str, layout: Layout, artifact_type: str | None = None
) -> tuple[list[Referrer], str]:
    """Fetch the artifacts about `subject` into the layout (verified); returns them and how they were found."""
    found, via = list_referrers(client, repo, subject, artifact_type)
    for entry in found:
        digest = str(entry.get("digest", ""))
        split_digest(digest)
        media_type, body = client.get_manifest(repo, digest)
        if sha256_digest(body) != digest:
            raise VerifyError(
                f"artifact manifest {digest} from {client.registry}/{repo} does not match its digest",
                f"received {sha256_digest(body)}", "the registry serves damaged data",
            )
        manifest = json.loads(body)
        if (manifest.get("subject") or {}).get("digest") != subject:
            raise VerifyError(
                f"artifact {digest} listed as a referrer of {subject} is about something else",
                f"its subject is {(manifest.get('subject') or {}).get('digest')!r}",
                "the referrers index of the registry is wrong; push the attestations again",
            )
        layout.put_bytes(body)
        desc = Descriptor(media_type, digest, len(body))
        for blob in layout.children(desc):
            if not layout.blob_path(blob.digest).is_file():
                client.fetch_blob(repo, blob, layout.blob_path(blob.digest))
        kept = [e for e in _entries(layout) if e.get("digest") != digest]
        _write_entries(layout, [*kept, _descriptor(manifest, body)])
    got = [r for r in referrers(layout, subject=subject) if r.digest in {str(e.get("digest")) for e in found}]
    return got, via
