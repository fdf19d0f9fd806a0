"""The OCI vocabulary every part of oci/ shares: media types, descriptors, digests, canonical JSON, references."""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermetic.core.errors import UsageError, VerifyError
from hermetic.core.names import DOCKER_HUB, looks_like_registry, valid_repository

OCI_LAYOUT_VERSION = "1.0.0"


MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


MT_INDEX = "application/vnd.oci.image.index.v1+json"


MT_CONFIG = "application/vnd.oci.image.config.v1+json"


MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


MANIFEST_TYPES = (MT_MANIFEST, MT_DOCKER_MANIFEST)


INDEX_TYPES = (MT_INDEX, MT_DOCKER_LIST)


REF_NAME = "org.opencontainers.image.ref.name"


LABEL_PREFIX = "io.hermetic."


_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}


def canonical_json(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def host_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def parse_json(data: bytes | str, what: str, fix: str = "") -> Any:
    """JSON from a file or a registry, any malformed input (nested too deep included) a VerifyError."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else "it is nested too deeply"
        raise VerifyError(f"{what} is not valid JSON", why[:300], fix) from None


MALFORMED = "the image is malformed: write it again (`hermetic image`) or pull it again; if it came so from a registry, ask its publisher"


def _mapping(value: Any, what: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise VerifyError(f"malformed descriptor in {where}", f"its {what} is not an object", MALFORMED)
    return {str(k): str(v) for k, v in value.items()}


def split_digest(digest: str) -> tuple[str, str]:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise VerifyError(
            f"unsupported or malformed digest {digest[:80]!r}", "hermetic handles sha256 digests only (sha256: and 64 hex digits)",
            "name the image by a sha256 digest; an image with other digests: rewrite it with sha256 (skopeo copy)",
        )
    return algo, hexpart


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: Mapping[str, str] | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.platform:
            out["platform"] = dict(self.platform)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> Descriptor:
        if not isinstance(data, dict):
            raise VerifyError(f"malformed descriptor in {where}", "a descriptor is a JSON object", MALFORMED)
        missing = [k for k in ("mediaType", "digest", "size") if k not in data]
        if missing:
            raise VerifyError(f"malformed descriptor in {where}", f"it has no {', '.join(missing)}", MALFORMED)
        size = data["size"]
        # an int64 as the image spec says: not a float (1e999), not a bool, not a string
        if type(size) is not int or not 0 <= size < 1 << 63:
            raise VerifyError(f"malformed descriptor in {where}", f"size {str(size)[:40]!r} is not a byte count", MALFORMED)
        if not isinstance(data["mediaType"], str) or not isinstance(data["digest"], str):
            raise VerifyError(f"malformed descriptor in {where}", "mediaType and digest must be strings", MALFORMED)
        desc = cls(
            media_type=data["mediaType"],
            digest=data["digest"],
            size=size,
            platform=_mapping(data["platform"], "platform", where) if data.get("platform") else None,
            annotations=_mapping(data.get("annotations") or {}, "annotations", where),
        )
        try:
            split_digest(desc.digest)
        except VerifyError as exc:
            raise VerifyError(f"malformed descriptor in {where}", exc.what, MALFORMED) from None
        return desc

    @property
    def ref_name(self) -> str:
        return self.annotations.get(REF_NAME, "")


@dataclass(frozen=True)
class LayoutRef:
    """A local OCI image layout as an image source: `oci:PATH[:TAG]`, TAG an index.json ref name."""

    path: Path
    tag: str = ""

    def __str__(self) -> str:
        return f"oci:{self.path}" + (f":{self.tag}" if self.tag else "")


@dataclass(frozen=True)
class Reference:
    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def reference(self) -> str:
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        out = f"{self.registry}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 100 else repr(text[:100]) + f"… ({len(text)} characters)"


def parse_reference(text: str) -> Reference:
    bad = UsageError(
        f"invalid image reference {_shown(text)}",
        "expected [REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]",
        "for example 127.0.0.1:5000/llvm-support-19.1.7:19.1.7",
    )
    if not text or any(c.isspace() for c in text) or "://" in text:
        raise bad
    rest, _, digest = text.partition("@")
    if digest:
        try:
            split_digest(digest)
        except VerifyError:
            raise bad from None
    first, slash, remainder = rest.partition("/")
    if slash and looks_like_registry(first):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    tag = ""
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, _, tag = path.rpartition(":")
    if registry == DOCKER_HUB and "/" not in path:
        path = "library/" + path
    if not valid_repository(path):
        raise bad
    if len(tag) > 128:
        raise UsageError(
            f"invalid image reference {_shown(text)}",
            f"its tag is {len(tag)} characters long; a tag has at most 128",
            "use a shorter tag, or pull by digest (REPOSITORY@sha256:…)",
        )
    if tag and set(tag) - set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"):
        raise bad
    return Reference(registry, path, tag, digest)
