"""HTTP to registries: TLS, redirects and size caps; credentials and tokens (the distribution token spec);
what a registry's refusals mean to a user."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import ipaddress
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hermetic.core.errors import RegistryError, UsageError, VerifyError
from hermetic.core.names import DOCKER_HUB, DOCKER_HUB_API

if TYPE_CHECKING:
    from hermetic.core.errors import HermeticError

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


# -- credentials and tokens --------------------------------------------------------------------------------

def _host_aliases(registry: str) -> set[str]:
    if registry in (DOCKER_HUB, DOCKER_HUB_API, "index.docker.io"):
        return {DOCKER_HUB, DOCKER_HUB_API, "index.docker.io"}
    return {registry}


def _auth_key_host(key: str) -> str:
    if "://" in key:
        key = urllib.parse.urlsplit(key).netloc
    return key.split("/", 1)[0]


def auth_files(environ: Mapping[str, str], home: Path) -> list[Path]:
    files = []
    if environ.get("REGISTRY_AUTH_FILE"):
        files.append(Path(environ["REGISTRY_AUTH_FILE"]))
    if environ.get("XDG_RUNTIME_DIR"):
        files.append(Path(environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    files.append(home / ".config" / "containers" / "auth.json")
    files.append(home / ".docker" / "config.json")
    return files


def find_credentials(registry: str, environ: Mapping[str, str], home: Path | None = None) -> tuple[str, str] | None:
    """Credentials for a registry: HERMETIC_REGISTRY_USER/PASSWORD, else the containers/docker auth files."""
    user = environ.get("HERMETIC_REGISTRY_USER")
    if user:
        return user, environ.get("HERMETIC_REGISTRY_PASSWORD", "")
    hosts = _host_aliases(registry)
    for path in auth_files(environ, home or Path(environ.get("HOME", str(Path.home())))):
        try:
            auths = json.loads(path.read_text()).get("auths", {})
        except FileNotFoundError:
            continue
        except (OSError, ValueError, AttributeError, RecursionError) as exc:
            raise UsageError(
                f"cannot read registry credentials from {path}", str(exc), "fix or remove the file"
            ) from exc
        if not isinstance(auths, dict):
            raise UsageError(f"cannot read registry credentials from {path}", "'auths' is not an object", "fix or remove the file")
        for key, entry in auths.items():
            if _auth_key_host(str(key)) not in hosts or not isinstance(entry, dict):
                continue
            if entry.get("auth"):
                try:
                    decoded = base64.b64decode(str(entry["auth"])).decode()
                except (ValueError, UnicodeDecodeError) as exc:
                    raise UsageError(f"bad 'auth' entry for {key} in {path}", str(exc), "log in again") from exc
                name, _, password = decoded.partition(":")
                return name, password
            if entry.get("username"):
                return str(entry["username"]), str(entry.get("password", ""))
    return None


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="…",service="…",scope="…"` → ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i] in " ,":
            i += 1
        eq = rest.find("=", i)
        if eq < 0:
            break
        key = rest[i:eq].strip().lower()
        i = eq + 1
        if i < len(rest) and rest[i] == '"':
            end = i + 1
            value = []
            while end < len(rest) and rest[end] != '"':
                if rest[end] == "\\" and end + 1 < len(rest):
                    end += 1
                value.append(rest[end])
                end += 1
            params[key] = "".join(value)
            i = end + 1
        else:
            end = rest.find(",", i)
            end = len(rest) if end < 0 else end
            params[key] = rest[i:end].strip()
            i = end
    return scheme.lower(), params




def merge_scopes(scopes: Sequence[str]) -> list[str]:
    """`repository:a:pull` and `repository:a:pull,push` as one `repository:a:pull,push`, in first-seen order."""
    merged: dict[str, list[str]] = {}
    for scope in scopes:
        resource, sep, actions = scope.rpartition(":")
        if not sep or ":" not in resource:
            merged.setdefault(scope, [])
            continue
        have = merged.setdefault(resource, [])
        have += [a for a in actions.split(",") if a and a not in have]
    return [f"{r}:{','.join(a)}" if a else r for r, a in merged.items()]


def basic(credentials: tuple[str, str]) -> str:
    user, password = credentials
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


_TOKEN_FIX = "the registry's token service is misconfigured; ask its operator"
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")


@dataclass
class Tokens:
    """Bearer tokens of one registry, fetched from the realm its challenges name and kept until they expire.

    The realm must be https (plain http only with --insecure and only on this machine); credentials go
    to it and to the registry, nowhere else. Without credentials the token is anonymous.
    """

    registry: str
    insecure: bool
    credentials: tuple[str, str] | None
    context: ssl.SSLContext
    timeout: float
    _cache: dict[str, tuple[str, float]] = field(default_factory=dict)

    def token(self, params: Mapping[str, str], scopes: Sequence[str]) -> str:
        key = " ".join([params.get("realm", ""), params.get("service", ""), *sorted(scopes)])
        cached = self._cache.get(key)
        if cached and cached[1] > time.monotonic():
            return cached[0]
        token, lifetime = self._fetch(params, scopes)
        # a little early: the registry checks expiry on its own clock
        self._cache[key] = (token, time.monotonic() + max(lifetime - 10, 1))
        return token

    def forget(self, token: str) -> None:
        """A token the registry refused (expired or revoked early): fetch a new one next time."""
        for key, (cached, _) in list(self._cache.items()):
            if cached == token:
                del self._cache[key]

    def _fetch(self, params: Mapping[str, str], scopes: Sequence[str]) -> tuple[str, float]:
        realm = params.get("realm", "")
        if not realm:
            raise RegistryError(
                f"{self.registry} sent a Bearer challenge without a realm",
                "the challenge must name the token service, e.g. realm=\"https://auth.example/token\"",
                "the registry is misconfigured; ask its operator",
            )
        url = checked_url(realm, insecure=self.insecure, what="the token service (realm)", http_loopback_only=True)
        query = [("service", params["service"])] if params.get("service") else []
        query += [("scope", s) for s in scopes]
        if query:
            url = dataclasses.replace(url, target=url.target + ("&" if "?" in url.target else "?") + urllib.parse.urlencode(query))
        headers = {"Authorization": basic(self.credentials)} if self.credentials else {}
        try:
            conn, resp = send_once(url, "GET", headers, self.context, self.timeout)
        except ssl.SSLError as exc:
            raise RegistryError(
                f"TLS to the token service {url.netloc} failed", str(exc),
                f"if it uses a private certificate authority, {TRUST_CA}",
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise _transient(f"cannot get a token from {realm}", f"{type(exc).__name__}: {exc}") from exc
        try:
            return self._answer(resp, realm)
        except (OSError, http.client.HTTPException) as exc:
            raise _transient(f"cannot get a token from {realm}", f"{type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()

    def _answer(self, resp: http.client.HTTPResponse, realm: str) -> tuple[str, float]:
        body = read_body(resp, document_limit(), f"the answer of the token service {realm}")
        if resp.status in REDIRECTS:
            raise RegistryError(
                f"the token service {realm} answered {resp.status} (to {resp.getheader('Location') or '?'})",
                "hermetic does not follow redirects of a token service: the credentials would go along",
                "give the registry a realm that answers itself",
            )
        if resp.status in (401, 403):
            if not self.credentials:
                raise RegistryError(
                    f"{self.registry} requires a login",
                    f"its token service {realm} gives no anonymous token ({resp.status})",
                    "log in with `podman login`/`skopeo login`/`docker login`, or set HERMETIC_REGISTRY_USER "
                    "and HERMETIC_REGISTRY_PASSWORD",
                )
            raise RegistryError(
                f"the token service {realm} refused the credentials of {self.credentials[0]!r} ({resp.status})",
                body[:300].decode(errors="replace").strip(),
                "check the credentials (HERMETIC_REGISTRY_USER/PASSWORD or the containers auth file) and that "
                "the user may access the repository",
            )
        if resp.status >= 500:
            raise _transient(f"the token service {realm} answered {resp.status}", body[:300].decode(errors="replace"))
        if resp.status != 200:
            raise RegistryError(
                f"the token service {realm} answered {resp.status}", body[:300].decode(errors="replace"), ""
            )
        return _parse_token(body, realm)


def _transient(what: str, why: str) -> HermeticError:
    return TransientRegistryError(what, why, "check the network and rerun")


def _parse_token(body: bytes, realm: str) -> tuple[str, float]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RegistryError(f"the token service {realm} answered something else than JSON", str(exc)[:200], _TOKEN_FIX) from exc
    if not isinstance(data, dict):
        raise RegistryError(f"the token service {realm} answered something else than a JSON object", "", _TOKEN_FIX)
    token = data.get("token") or data.get("access_token")
    if not isinstance(token, str) or not token:
        raise RegistryError(f"the token service {realm} sent no token", "neither 'token' nor 'access_token'", _TOKEN_FIX)
    if set(token) - _TOKEN_CHARS or len(token) > 64 << 10:
        raise RegistryError(
            f"the token service {realm} sent a token hermetic cannot send back",
            "a bearer token is at most 64 KiB of letters, digits and -._~+/=",
            "the token service is misconfigured or hostile",
        )
    lifetime = data.get("expires_in")
    if isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)) or not 0 < lifetime < 1e9:
        lifetime = 60  # the spec's default
    return token, float(lifetime)


# -- refusals ------------------------------------------------------------------------------------------

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


def _error_codes(body: bytes) -> list[str]:
    """The distribution spec's error codes in a response body ({"errors": [{"code": …}]})."""
    try:
        errors = json.loads(body).get("errors") or []
    except (ValueError, AttributeError, RecursionError):
        return []
    if not isinstance(errors, list):
        return []
    return [str(e.get("code")) for e in errors if isinstance(e, dict) and e.get("code")]
