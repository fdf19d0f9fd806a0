"""Names in image references as the OCI distribution spec allows them: one rule for settings and for oci."""

from __future__ import annotations

_REPOSITORY_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789._-/")


def looks_like_registry(first: str) -> bool:
    """Whether the first path component of a reference names a registry (a host) rather than a repository."""
    return "." in first or ":" in first or first == "localhost"


def valid_repository(path: str) -> bool:
    """A repository name as the distribution spec allows it: lowercase path components, no empty one."""
    return bool(path) and not set(path) - _REPOSITORY_CHARS and not (
        path.startswith("/") or path.endswith("/") or "//" in path)


DOCKER_HUB = "docker.io"


DOCKER_HUB_API = "registry-1.docker.io"
