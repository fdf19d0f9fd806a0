"""Image references: REGISTRY/REPO[:TAG|@DIGEST], and local image layouts as image sources."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from hermetic.core.errors import UsageError, VerifyError
from hermetic.model.settings import looks_like_registry, valid_repository
from hermetic.oci.layout import Layout, LayoutRef, split_digest
from hermetic.oci.transport import DOCKER_HUB

# -- references -----------------------------------------------------------------


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


def _error_codes(body: bytes) -> list[str]:
    """The distribution spec's error codes in a response body ({"errors": [{"code": …}]})."""
    try:
        errors = json.loads(body).get("errors") or []
    except (ValueError, AttributeError, RecursionError):
        return []
    if not isinstance(errors, list):
        return []
    return [str(e.get("code")) for e in errors if isinstance(e, dict) and e.get("code")]


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


_TAG_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _no_such_path(path: str, how: str) -> UsageError:
    return UsageError(
        f"{path}: no such file or directory",
        how,
        "check the path; a local image is an OCI image layout directory (written by `hermetic image llvm` "
        "or `skopeo copy … oci:DIR`), given as DIR or oci:DIR[:TAG]",
    )


def _exists(path: Path) -> bool:
    """Whether a path exists; text too long for a path (or otherwise unusable as one) does not."""
    try:
        return path.exists()
    except OSError:
        return False


def _local_layout(path: Path, tag: str, text: str) -> LayoutRef:
    if not _exists(path):
        raise _no_such_path(str(path), f"{text!r} names a local image layout")
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory", f"{text!r} names a local image layout", "pass a layout directory")
    Layout(path).check()  # "not an OCI image layout", with what to do
    return LayoutRef(path, tag)


def parse_image_source(text: str) -> Reference | LayoutRef:
    """A registry reference or a local OCI image layout.

    `oci:PATH[:TAG]` is a layout (TAG selects by org.opencontainers.image.ref.name; a PATH
    that exists as given wins over splitting off a tag); so is an existing directory holding
    an `oci-layout` file. Text that can only be a path (absolute, ./, ../, ~) and does not
    exist is "no such file or directory", never a registry host to look up.
    """
    if text.startswith("oci:"):
        rest = text[4:]
        if not rest:
            raise UsageError(f"invalid image source {text!r}", "oci: needs a path", "write oci:DIR or oci:DIR:TAG")
        path, tag = rest, ""
        if not _exists(Path(rest).expanduser()) and ":" in rest:
            head, _, maybe_tag = rest.rpartition(":")
            if head and maybe_tag and "/" not in maybe_tag and not set(maybe_tag) - _TAG_CHARS:
                path, tag = head, maybe_tag
        return _local_layout(Path(path).expanduser(), tag, text)
    if text.startswith(("/", "./", "../", "~")) or text in (".", ".."):
        return _local_layout(Path(text).expanduser(), "", text)
    if _exists(Path(text) / "oci-layout") and (Path(text) / "oci-layout").is_file():
        return LayoutRef(Path(text))
    try:
        return parse_reference(text)
    except UsageError as exc:
        first, slash, _ = text.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost") and not _exists(Path(text)):
            raise  # REGISTRY/…: a reference with a mistake, not a path
        if os.sep in text or not _exists(Path(text)):
            raise UsageError(
                f"{_shown(text)}: no such file or directory, and not an image reference",
                f"{exc.why}; or a local OCI image layout directory (DIR or oci:DIR[:TAG])",
                exc.fix,
            ) from None
        raise


