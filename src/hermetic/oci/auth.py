"""Registry credentials (auth files, HERMETIC_REGISTRY_*), auth challenges, and tokens per the distribution token spec."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import ssl
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hermetic.core.errors import HermeticError, RegistryError, UsageError
from hermetic.oci.transport import (
    DOCKER_HUB,
    DOCKER_HUB_API,
    REDIRECTS,
    TRUST_CA,
    TransientRegistryError,
    checked_url,
    document_limit,
    read_body,
    send_once,
)

# -- credentials ----------------------------------------------------------------


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
