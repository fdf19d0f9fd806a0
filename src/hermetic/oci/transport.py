"""HTTP under the registry client: TLS trust, which URLs hermetic will follow, one-shot requests, bounded reads."""

from __future__ import annotations

import http.client
import ipaddress
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hermetic.core.errors import RegistryError, UsageError, VerifyError

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
DEFAULT_MAX_DOCUMENT = 4 << 20  # the distribution spec's suggested limit for manifests
# How a user trusts a private CA or allows plain http: the options of push, pull and inspect; a --substitute
# names a plain-http registry as http://REGISTRY/REPO and trusts what SSL_CERT_FILE names.
TRUST_CA = "pass its CA certificate with --ca FILE (push, pull, inspect) or SSL_CERT_FILE=FILE"
PLAIN_HTTP = "for a plain-http registry on this machine: --insecure (push, pull, inspect) or --substitute http://REGISTRY/REPO"
_document_limit = [DEFAULT_MAX_DOCUMENT]


def document_limit() -> int:
    """The most bytes hermetic reads of a manifest, index, image config or registry answer."""
    return _document_limit[0]


def set_document_limit(size: int) -> None:
    """Set once by the CLI (--max-manifest-size); everything below reads it through document_limit()."""
    _document_limit[0] = size


class TransientRegistryError(RegistryError):
    """The registry did not answer or answered 5xx after every retry; the operation may be rerun."""


def is_loopback(host: str) -> bool:
    """Whether a host name (no port) is this machine: localhost, 127.0.0.0/8 or ::1."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def tls_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """The system's trust (SSL_CERT_FILE / SSL_CERT_DIR honoured), plus the CA certificates in ca_file."""
    ctx = ssl.create_default_context()
    if ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"cannot read CA certificates from {ca_file}",
                str(exc),
                "pass --ca a PEM file of the certificate authority that signed the registry's certificate",
            ) from exc
    return ctx


@dataclass(frozen=True)
class Url:
    """An absolute http(s) URL that passed the policy of `checked_url`."""

    scheme: str
    netloc: str
    target: str  # path and query

    @property
    def hostname(self) -> str:
        return urllib.parse.urlsplit(f"//{self.netloc}").hostname or ""

    def __str__(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.target}"


def checked_url(url: str, *, insecure: bool, what: str, http_loopback_only: bool = False) -> Url:
    """`url` if hermetic may fetch it: https, or http with --insecure (and, for http_loopback_only, only
    to this machine); never file:, ftp: or another scheme, never credentials inside the URL."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    shown = url if len(url) <= 200 else url[:200] + "…"
    if scheme not in ("https", "http"):
        raise RegistryError(
            f"refusing {what} {shown!r}",
            f"its scheme is {scheme or '(none)'!r}; hermetic only fetches https:// URLs "
            "(and http:// with --insecure), never local files or other schemes",
            "the registry is misconfigured or hostile: use another registry, or ask its operator",
        )
    if not parts.netloc or parts.hostname is None:
        raise RegistryError(f"refusing {what} {shown!r}", "it names no host", "the registry is misconfigured")
    if parts.username is not None or parts.password is not None:
        raise RegistryError(
            f"refusing {what} {shown!r}",
            "it carries credentials inside the URL",
            "the registry is misconfigured: credentials go in the Authorization header, never in a URL",
        )
    if scheme == "http":
        if not insecure:
            raise RegistryError(
                f"refusing {what} {shown!r}",
                "it is plain http, which anyone on the way can read and change; hermetic needs https here",
                f"use a registry that answers over https; {PLAIN_HTTP}",
            )
        if http_loopback_only and not is_loopback(parts.hostname):
            raise RegistryError(
                f"refusing {what} {shown!r}",
                f"it is plain http to {parts.hostname}, another machine: credentials and tokens would cross "
                "the network readable; even with --insecure hermetic uses plain http only on this machine",
                "give the registry an https token service (realm)",
            )
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return Url(scheme, parts.netloc, target)


def connect(url: Url, context: ssl.SSLContext, timeout: float) -> http.client.HTTPConnection:
    if url.scheme == "https":
        return http.client.HTTPSConnection(url.netloc, timeout=timeout, context=context)
    return http.client.HTTPConnection(url.netloc, timeout=timeout)


def too_large(what: str, size: int, limit: int) -> VerifyError:
    return VerifyError(
        f"{what} is larger than hermetic reads",
        f"{size} bytes; the limit for manifests, indexes and image configs is {limit} bytes",
        "if you trust its source, raise the limit: --max-manifest-size 16M (push, pull, inspect)",
    )


def read_body(resp: http.client.HTTPResponse, limit: int, what: str) -> bytes:
    """The whole body, refused past `limit` bytes (the caller closes the connection after a refusal)."""
    length = resp.getheader("Content-Length")
    if length and length.strip().isdigit() and int(length) > limit:
        raise too_large(what, int(length), limit)
    data = resp.read(limit + 1)
    if len(data) > limit:
        raise too_large(what, len(data), limit)
    return data


def send_once(
    url: Url,
    method: str,
    headers: Mapping[str, str],
    context: ssl.SSLContext,
    timeout: float,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """One request on a connection of its own; the caller reads the response and closes the connection."""
    conn = connect(url, context, timeout)
    try:
        conn.request(method, url.target, headers=dict(headers))
        return conn, conn.getresponse()
    except BaseException:
        conn.close()
        raise
