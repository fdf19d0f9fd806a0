"""What a registry's refusals mean to a user: error bodies read, 404s on manifests told apart."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

from hermetic.core.errors import RegistryError
from hermetic.oci.reference import _error_codes
from hermetic.oci.transport import REDIRECTS, TransientRegistryError

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class Answer(Protocol):
    status: int
    body: bytes

    def header(self, name: str) -> str: ...


def no_query(url: str) -> str:
    """A URL as shown in messages: a presigned storage URL's query is a credential."""
    return url.split("?", 1)[0]


def error_messages(body: bytes) -> list[str]:
    """`CODE: message` of each error in a distribution error body ({"errors": [...]})."""
    try:
        errors = json.loads(body).get("errors")
    except (ValueError, AttributeError, RecursionError):
        return []
    if not isinstance(errors, list):
        return []
    return [f"{e.get('code')}: {e.get('message')}"[:300] for e in errors[:10] if isinstance(e, dict)]


def error_for(method: str, url: str, resp: Answer) -> RegistryError:
    """What a refusal of the registry (or of the storage it redirected to) means, and what to do."""
    detail = resp.body[:500].decode(errors="replace").strip()
    errors = error_messages(resp.body)
    detail = "; ".join(errors) or detail
    what = f"{method} {no_query(url)} answered {resp.status}"
    if resp.status in RETRY_STATUSES:
        return TransientRegistryError(
            what, detail, "the registry is failing; rerun later, finished blobs are skipped"
        )
    if resp.status in (401, 403):
        return RegistryError(
            what,
            detail or "access denied",
            "log in (podman/skopeo login, docker login) or set HERMETIC_REGISTRY_USER and HERMETIC_REGISTRY_PASSWORD",
        )
    if resp.status in REDIRECTS:
        return RegistryError(
            what,
            f"a redirect to {no_query(resp.header('Location')) or '?'}, where hermetic expects an answer",
            "hermetic follows redirects of blob downloads only; ask the registry's operator",
        )
    if resp.status == 404 and "/blobs/" in url:
        return RegistryError(
            what,
            detail or "the blob is not in the repository",
            "the registry lacks a blob that the image's manifest names: push the image again "
            "(`hermetic push LAYOUT REF` uploads only what is missing)",
        )
    return RegistryError(what, detail, "check the reference and the registry's status; the answer above says what it refused")


def manifest_not_found(
    registry: str, repo: str, reference: str, body: bytes, list_tags: Callable[[str], list[str] | None]
) -> RegistryError:
    """A 404 on a manifest, told apart: no such repository, no such tag, or no such digest.

    The distribution spec's error codes say which (NAME_UNKNOWN, MANIFEST_UNKNOWN); registries
    that answer MANIFEST_UNKNOWN for both are asked for the repository's tag list.
    """
    codes = _error_codes(body)
    name = f"{registry}/{repo}"
    asked = f"GET /v2/{repo}/manifests/{reference} answered 404" + (f" ({', '.join(codes)})" if codes else "")
    tags: list[str] | None = []
    if "NAME_UNKNOWN" in codes:
        tags = None
    else:
        try:
            tags = list_tags(repo)
        except RegistryError:
            tags = []  # the tag list is private or broken: say what we know
    if tags is None:
        return RegistryError(
            f"repository {name} does not exist",
            f"{asked}; the registry does not know the repository {repo!r}",
            f"check the repository name (a typo, or a missing org/ prefix?), or push the image first: "
            f"hermetic push LAYOUT {name}:TAG",
        )
    if reference.startswith("sha256:"):
        return RegistryError(
            f"{name} has no manifest {reference}",
            asked,
            f"check the digest (`hermetic inspect {name}:TAG` prints the digest of a tag), or pull by tag",
        )
    have = ", ".join(sorted(tags)[:20]) + (f", … ({len(tags)} in all)" if len(tags) > 20 else "")
    return RegistryError(
        f"{name} has no tag {reference!r}",
        f"{asked}; the repository exists" + (f" and has the tags: {have}" if tags else ""),
        (f"pull one of its tags (e.g. {name}:{sorted(tags)[0]}), or " if tags else "")
        + f"push the image under this tag first: hermetic push LAYOUT {name}:{reference}",
    )
