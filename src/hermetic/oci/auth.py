"""Registry credentials: the containers/docker auth files and HERMETIC_REGISTRY_* variables, and auth challenges."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError
from .reference import DOCKER_HUB, DOCKER_HUB_API

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
        except (OSError, ValueError, AttributeError) as exc:
            raise UsageError(
                f"cannot read registry credentials from {path}", str(exc), "fix or remove the file"
            ) from exc
        for key, entry in (auths or {}).items():
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


