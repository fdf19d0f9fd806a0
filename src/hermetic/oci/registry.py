"""An OCI distribution client: push an image layout to a registry, pull one back.

Push order is what keeps a registry consistent when it fails half way: every
blob is uploaded (or found, or mounted from another repository), then every
blob is confirmed present with HEAD, and only then is the manifest (the tag)
written. A push that dies leaves at worst unreferenced blobs, never a tag that
points at missing ones; rerunning it skips what is already there.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import http.client
import json
import os
import shutil
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import IO, Any

from ..errors import RegistryError, UsageError, VerifyError, disk_full
from .layout import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    MT_DOCKER_LIST,
    MT_DOCKER_MANIFEST,
    MT_INDEX,
    MT_MANIFEST,
    REF_NAME,
    Descriptor,
    Layout,
    LayoutRef,
    _replace_dir,
    check_platform,
    host_arch,
    pick_root,
    select_manifest,
    sha256_digest,
    split_digest,
)

DEFAULT_CHUNK = 16 << 20
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
ACCEPT = ", ".join((MT_MANIFEST, MT_INDEX, MT_DOCKER_MANIFEST, MT_DOCKER_LIST))


class TransientRegistryError(RegistryError):
    """The registry did not answer or answered 5xx after every retry; the operation may be rerun."""


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
        return [str(e.get("code")) for e in errors if isinstance(e, dict) and e.get("code")]
    except (ValueError, AttributeError):
        return []


def parse_reference(text: str) -> Reference:
    bad = UsageError(
        f"invalid image reference {text!r}",
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
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    tag = ""
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, _, tag = path.rpartition(":")
    if registry == DOCKER_HUB and "/" not in path:
        path = "library/" + path
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789._-/")
    if not path or set(path) - allowed or path.startswith("/") or path.endswith("/") or "//" in path:
        raise bad
    if tag and (len(tag) > 128 or set(tag) - set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")):
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


def _local_layout(path: Path, tag: str, text: str) -> LayoutRef:
    if not path.exists():
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
        if not Path(rest).expanduser().exists() and ":" in rest:
            head, _, maybe_tag = rest.rpartition(":")
            if head and maybe_tag and "/" not in maybe_tag and not set(maybe_tag) - _TAG_CHARS:
                path, tag = head, maybe_tag
        return _local_layout(Path(path).expanduser(), tag, text)
    if text.startswith(("/", "./", "../", "~")) or text in (".", ".."):
        return _local_layout(Path(text).expanduser(), "", text)
    if (Path(text) / "oci-layout").is_file():
        return LayoutRef(Path(text))
    try:
        return parse_reference(text)
    except UsageError as exc:
        if os.sep in text or not Path(text).exists():
            raise UsageError(
                f"{text}: no such file or directory, and not an image reference",
                f"{exc.why}; or a local OCI image layout directory (DIR or oci:DIR[:TAG])",
                exc.fix,
            ) from None
        raise


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


# -- progress -------------------------------------------------------------------


class Progress:
    """Progress of large blobs on stderr; a line per 10 % when stderr is not a terminal."""

    threshold = 8 << 20

    def __init__(self, enabled: bool = True, stream: IO[str] | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._label = ""
        self._total = 0
        self._step = -1
        self._start = 0.0

    def start(self, label: str, total: int) -> None:
        self._label, self._total, self._step, self._start = label, total, -1, time.monotonic()
        self.update(0)

    def update(self, done: int) -> None:
        if not self.enabled or self._total < self.threshold:
            return
        step = int(10 * done / self._total) if self._total else 10
        tty = self.stream.isatty()
        if step == self._step and not tty:
            return
        self._step = step
        line = f"{self._label} {done / 1e6:8.1f}/{self._total / 1e6:.1f} MB"
        self.stream.write(("\r" + line) if tty else line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if not self.enabled or self._total < self.threshold:
            return
        secs = max(time.monotonic() - self._start, 1e-9)
        end = "\n" if self.stream.isatty() else ""
        self.stream.write(f"{end}{self._label} done, {self._total / 1e6 / secs:.1f} MB/s\n")
        self.stream.flush()


# -- the client -------------------------------------------------------------------


@dataclass
class _Response:
    status: int
    headers: Message
    body: bytes

    def header(self, name: str) -> str:
        return str(self.headers.get(name) or "")


@dataclass
class Stats:
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    mounted: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    retries: int = 0
    seconds: float = 0.0


class RegistryClient:
    def __init__(
        self,
        registry: str,
        *,
        insecure: bool = False,
        credentials: tuple[str, str] | None = None,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        timeout: float = 120.0,
        progress: Progress | None = None,
    ) -> None:
        self.registry = registry
        self.host = DOCKER_HUB_API if registry == DOCKER_HUB else registry
        self.scheme = "http" if insecure else "https"
        self.credentials = credentials
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.progress = progress or Progress(enabled=False)
        self.stats = Stats()
        self._conn: http.client.HTTPConnection | None = None
        self._auth_header = ""
        self._tokens: dict[str, str] = {}
        # a push asks for pull,push on its repository from the first request on
        self.scopes: list[str] = []

    # -- transport ------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}"

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(
                    self.host, timeout=self.timeout, context=ssl.create_default_context()
                )
            else:
                self._conn = http.client.HTTPConnection(self.host, timeout=self.timeout)
        return self._conn

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _sleep(self, attempt: int) -> None:
        self.stats.retries += 1
        time.sleep(min(self.backoff * (2**attempt), self.max_backoff))

    def _target(self, url: str) -> str:
        """A path+query on our registry from a relative or absolute URL (e.g. an upload Location)."""
        full = urllib.parse.urljoin(self.base + "/", url)
        parts = urllib.parse.urlsplit(full)
        if parts.netloc != self.host:
            raise RegistryError(
                f"the registry sent us to another host: {parts.netloc}",
                f"Location {url!r}",
                "hermetic follows upload locations on the same registry only",
            )
        return parts.path + ("?" + parts.query if parts.query else "")

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        ok: Iterable[int] = (200,),
        scopes: Sequence[str] = (),
        retry: bool = True,
        stream: bool = False,
    ) -> _Response | http.client.HTTPResponse:
        ok = tuple(ok)
        target = self._target(url)
        attempt = 0
        authed = False
        while True:
            hdrs = dict(headers or {})
            if self._auth_header:
                hdrs["Authorization"] = self._auth_header
            if body is not None:
                hdrs["Content-Length"] = str(len(body))
            try:
                conn = self._connection()
                conn.request(method, target, body=body, headers=hdrs)
                resp = conn.getresponse()
                if resp.status == 401 and not authed:
                    resp.read()
                    self._authenticate(resp.getheader("WWW-Authenticate") or "", scopes)
                    authed = True
                    continue
                if resp.status in RETRY_STATUSES and retry and attempt < self.retries:
                    resp.read()
                    self._sleep(attempt)
                    attempt += 1
                    continue
                if stream and resp.status in ok:
                    return resp
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
            except ssl.SSLError as exc:
                self.close()
                raise RegistryError(
                    f"TLS to {self.host} failed", str(exc), "for a plain-http registry on localhost pass --insecure"
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if retry and attempt < self.retries:
                    self._sleep(attempt)
                    attempt += 1
                    continue
                raise TransientRegistryError(
                    f"{method} {self.base}{target.split('?')[0]} failed",
                    f"{type(exc).__name__}: {exc}",
                    "check that the registry is up and reachable, then rerun; finished blobs are skipped",
                ) from exc
            result = _Response(resp.status, resp.headers, data)
            if resp.status not in ok:
                raise self._error(method, target, result)
            return result

    def _error(self, method: str, target: str, resp: _Response) -> RegistryError:
        detail = resp.body[:500].decode(errors="replace").strip()
        try:
            errors = json.loads(resp.body).get("errors") or []
            detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors) or detail
        except (ValueError, AttributeError):
            pass
        what = f"{method} {self.base}{target.split('?')[0]} answered {resp.status}"
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
        if resp.status == 404 and "/blobs/" in target:
            return RegistryError(
                what,
                detail or "the blob is not in the repository",
                "the registry lacks a blob that the image's manifest names: push the image again "
                "(`hermetic push LAYOUT REF` uploads only what is missing)",
            )
        return RegistryError(what, detail, "")

    # -- authentication ---------------------------------------------------------
    def _authenticate(self, challenge: str, scopes: Sequence[str]) -> None:
        scheme, params = parse_challenge(challenge)
        if scheme == "basic":
            if not self.credentials:
                raise RegistryError(
                    f"{self.registry} requires a login",
                    "it asked for Basic authentication and no credentials were found",
                    "log in with `podman login`/`skopeo login`/`docker login`, or set HERMETIC_REGISTRY_USER and HERMETIC_REGISTRY_PASSWORD",
                )
            user, password = self.credentials
            self._auth_header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            return
        if scheme == "bearer":
            challenged = params["scope"].split(" ") if params.get("scope") else []
            wanted = list(dict.fromkeys([*self.scopes, *challenged, *scopes]))
            key = " ".join(sorted(wanted))
            if key not in self._tokens:
                self._tokens[key] = self._fetch_token(params, wanted)
            self._auth_header = "Bearer " + self._tokens[key]
            return
        raise RegistryError(
            f"{self.registry} asked for unsupported authentication {scheme or '(none)'!r}",
            f"WWW-Authenticate: {challenge!r}",
            "hermetic supports Basic and Bearer token authentication",
        )

    def _fetch_token(self, params: Mapping[str, str], scopes: Sequence[str]) -> str:
        realm = params.get("realm")
        if not realm:
            raise RegistryError(f"{self.registry} sent a Bearer challenge without a realm", "", "")
        query = [("service", params["service"])] if params.get("service") else []
        query += [("scope", s) for s in scopes]
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        req = urllib.request.Request(url)
        if self.credentials:
            user, password = self.credentials
            req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RegistryError(
                f"the token service {realm} refused us ({exc.code})",
                exc.read()[:300].decode(errors="replace"),
                "check the credentials (HERMETIC_REGISTRY_USER/PASSWORD or the containers auth file)",
            ) from exc
        except (OSError, ValueError) as exc:
            raise TransientRegistryError(
                f"cannot get a token from {realm}", str(exc), "check the network and rerun"
            ) from exc
        token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
        if not token:
            raise RegistryError(f"the token service {realm} sent no token", "", "")
        return str(token)

    # -- blobs --------------------------------------------------------------------
    def blob_exists(self, repo: str, digest: str) -> bool:
        resp = self.request("HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404), scopes=[f"repository:{repo}:pull"])
        return resp.status == 200

    def _start_upload(self, repo: str, scopes: Sequence[str], query: str = "") -> _Response:
        resp = self.request(
            "POST", f"/v2/{repo}/blobs/uploads/{query}", ok=(201, 202), scopes=scopes, headers={"Content-Length": "0"}
        )
        assert isinstance(resp, _Response)
        return resp

    def push_blob(
        self, repo: str, desc: Descriptor, path: Path, chunk_size: int, mount_from: Sequence[str] = ()
    ) -> None:
        scopes = [f"repository:{repo}:pull,push"]
        if self.blob_exists(repo, desc.digest):
            self.stats.skipped.append(desc.digest)
            return
        location = ""
        for source in mount_from:
            if source == repo:
                continue
            q = "?" + urllib.parse.urlencode({"mount": desc.digest, "from": source})
            resp = self._start_upload(repo, [*scopes, f"repository:{source}:pull"], q)
            if resp.status == 201:
                self.stats.mounted.append(desc.digest)
                return
            location = resp.header("Location")
            break
        label = f"push {desc.digest[7:19]}"
        for attempt in range(self.retries + 1):
            try:
                if not location:
                    location = self._start_upload(repo, scopes).header("Location")
                if not location:
                    raise RegistryError(f"{self.registry} started an upload without a Location", "", "")
                self._upload(location, desc, path, chunk_size, label)
                self.stats.uploaded.append(desc.digest)
                return
            except TransientRegistryError:
                location = ""
                if attempt == self.retries:
                    raise
                self._sleep(attempt)
                # the registry may have finished the blob before the connection dropped
                try:
                    if self.blob_exists(repo, desc.digest):
                        self.stats.uploaded.append(desc.digest)
                        return
                except TransientRegistryError:
                    pass

    @staticmethod
    def _with_digest(location: str, digest: str) -> str:
        return location + ("&" if "?" in location else "?") + "digest=" + urllib.parse.quote(digest)

    def _upload(self, location: str, desc: Descriptor, path: Path, chunk_size: int, label: str) -> None:
        octet = {"Content-Type": "application/octet-stream"}
        self.progress.start(label, desc.size)
        with open(path, "rb") as f:
            if desc.size <= chunk_size:
                data = f.read()
                self.request(
                    "PUT", self._with_digest(location, desc.digest), body=data, headers=octet, ok=(201,), retry=False
                )
                self.stats.bytes_sent += len(data)
            else:
                location = self._upload_chunks(f, location, desc.size, chunk_size)
                self.request(
                    "PUT", self._with_digest(location, desc.digest), body=b"", headers=octet, ok=(201,), retry=False
                )
        self.progress.update(desc.size)
        self.progress.finish()

    def _upload_chunks(self, f: IO[bytes], location: str, size: int, chunk_size: int) -> str:
        """PATCH the file in chunks; after a failure, ask the registry how far it got and resume there."""
        offset = 0
        failures = 0  # consecutive: a long upload over a flaky link may fail often yet progress
        while offset < size:
            f.seek(offset)
            chunk = f.read(chunk_size)
            hdrs = {"Content-Type": "application/octet-stream", "Content-Range": f"{offset}-{offset + len(chunk) - 1}"}
            try:
                resp = self.request("PATCH", location, body=chunk, headers=hdrs, ok=(202, 416), retry=False)
                assert isinstance(resp, _Response)
                if resp.status == 416:
                    raise TransientRegistryError("the registry lost track of the upload", "416 on PATCH", "")
            except TransientRegistryError:
                failures += 1
                if failures > self.retries:
                    raise
                self._sleep(failures - 1)
                location, offset = self._upload_status(location)
                continue
            location = resp.header("Location") or location
            offset += len(chunk)
            failures = 0
            self.stats.bytes_sent += len(chunk)
            self.progress.update(offset)
        return location

    def _upload_status(self, location: str) -> tuple[str, int]:
        """Where an interrupted upload stands: its (new) location and the next offset to send."""
        resp = self.request("GET", location, ok=(204,))
        assert isinstance(resp, _Response)
        _, _, end = resp.header("Range").partition("-")
        try:
            last = int(end)
        except ValueError:
            raise TransientRegistryError("the registry sent no upload range", resp.header("Range"), "") from None
        # "0-0" means nothing or one byte; a PATCH from 0 then gets 416 and the blob starts over
        offset = last + 1 if last > 0 else 0
        return resp.header("Location") or location, offset

    def fetch_blob(self, repo: str, desc: Descriptor, dest: Path) -> None:
        """Download a blob to dest, verifying size and digest; retried from the start on failure."""
        split_digest(desc.digest)
        label = f"pull {desc.digest[7:19]}"
        for attempt in range(self.retries + 1):
            tmp = dest.with_name(f".{dest.name}.part")
            try:
                resp = self.request(
                    "GET", f"/v2/{repo}/blobs/{desc.digest}", ok=(200,), scopes=[f"repository:{repo}:pull"], stream=True
                )
                h = hashlib.sha256()
                size = 0
                self.progress.start(label, desc.size)
                if isinstance(resp, _Response):  # not reached: stream=True returns the raw response
                    raise RegistryError("internal: expected a streamed response", "", "")
                with open(tmp, "wb") as out:
                    while block := resp.read(1 << 20):
                        h.update(block)
                        size += len(block)
                        if size > desc.size:
                            break
                        out.write(block)
                        self.progress.update(size)
                if size != desc.size or "sha256:" + h.hexdigest() != desc.digest:
                    self.close()
                    raise VerifyError(
                        f"blob {desc.digest} from {self.registry}/{repo} does not match its digest",
                        f"received {size} bytes (expected {desc.size}) with digest sha256:{h.hexdigest()}",
                        "the registry serves damaged data; nothing was kept",
                    )
                self.progress.finish()
                os.replace(tmp, dest)
                return
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                tmp.unlink(missing_ok=True)
                if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                    raise disk_full(str(dest), exc) from exc  # retrying cannot help
                if attempt == self.retries:
                    raise TransientRegistryError(
                        f"downloading {desc.digest} failed", str(exc), "rerun the pull"
                    ) from exc
                self._sleep(attempt)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    # -- manifests --------------------------------------------------------------
    def get_manifest(self, repo: str, reference: str) -> tuple[str, bytes]:
        resp = self.request(
            "GET",
            f"/v2/{repo}/manifests/{reference}",
            headers={"Accept": ACCEPT},
            ok=(200, 404),
            scopes=[f"repository:{repo}:pull"],
        )
        assert isinstance(resp, _Response)
        if resp.status == 404:
            raise self._manifest_not_found(repo, reference, resp)
        media_type = resp.header("Content-Type").split(";")[0].strip()
        try:
            doc = json.loads(resp.body)
        except ValueError as exc:
            raise VerifyError(f"manifest {repo}:{reference} is not JSON", str(exc), "") from exc
        media_type = str(doc.get("mediaType") or media_type) if isinstance(doc, dict) else media_type
        return media_type, resp.body

    def list_tags(self, repo: str) -> list[str] | None:
        """The repository's tags, or None when the registry says the repository does not exist."""
        resp = self.request("GET", f"/v2/{repo}/tags/list", ok=(200, 404), scopes=[f"repository:{repo}:pull"])
        assert isinstance(resp, _Response)
        if resp.status == 404:
            return None
        try:
            tags = json.loads(resp.body).get("tags") or []
        except (ValueError, AttributeError) as exc:
            raise RegistryError(f"{self.registry}/{repo}: the tag list is not JSON", str(exc), "") from exc
        return [str(t) for t in tags]

    def _manifest_not_found(self, repo: str, reference: str, resp: _Response) -> RegistryError:
        """A 404 on a manifest, told apart: no such repository, no such tag, or no such digest.

        The distribution spec's error codes say which (NAME_UNKNOWN, MANIFEST_UNKNOWN); registries
        that answer MANIFEST_UNKNOWN for both are asked for the repository's tag list.
        """
        codes = _error_codes(resp.body)
        name = f"{self.registry}/{repo}"
        asked = f"GET /v2/{repo}/manifests/{reference} answered 404" + (f" ({', '.join(codes)})" if codes else "")
        tags: list[str] | None = []
        if "NAME_UNKNOWN" in codes:
            tags = None
        else:
            try:
                tags = self.list_tags(repo)
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

    def manifest_exists(self, repo: str, reference: str) -> bool:
        resp = self.request(
            "HEAD",
            f"/v2/{repo}/manifests/{reference}",
            headers={"Accept": ACCEPT},
            ok=(200, 404),
            scopes=[f"repository:{repo}:pull"],
        )
        return resp.status == 200

    def put_manifest(self, repo: str, reference: str, media_type: str, data: bytes) -> str:
        """PUT a manifest; returns the registry's OCI-Subject header ('' unless it indexed a subject)."""
        resp = self.request(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            headers={"Content-Type": media_type},
            body=data,
            ok=(201,),
            scopes=[f"repository:{repo}:pull,push"],
        )
        assert isinstance(resp, _Response)
        echoed = resp.header("Docker-Content-Digest")
        if echoed and echoed != sha256_digest(data):
            raise RegistryError(
                f"{self.registry} stored the manifest under another digest",
                f"sent {sha256_digest(data)}, registry says {echoed}",
                "the registry rewrote the manifest; use one that stores manifests verbatim",
            )
        return resp.header("OCI-Subject")


# -- push and pull ------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    reference: Reference
    digest: str
    stats: Stats


def push_layout(
    client: RegistryClient,
    layout: Layout,
    ref: Reference,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    mount_from: Sequence[str] = (),
    ref_name: str | None = None,
) -> PushResult:
    if chunk_size < 1:
        raise UsageError(f"invalid chunk size {chunk_size}", "", "give a positive number of bytes")
    start = time.monotonic()
    root = pick_root(layout, ref_name)
    layout.verify(root)  # a damaged layout is refused before anything goes out
    if ref.digest and ref.digest != root.digest:
        raise UsageError(
            f"{ref} names digest {ref.digest}",
            f"the layout's image is {root.digest}",
            "push by tag, or name the right digest",
        )
    repo = ref.repository
    client.scopes = [f"repository:{repo}:pull,push", *(f"repository:{m}:pull" for m in mount_from if m != repo)]

    def push_manifest(desc: Descriptor, reference: str) -> None:
        children = layout.children(desc)
        if desc.media_type in INDEX_TYPES:
            for child in children:
                push_manifest(child, child.digest)
        else:
            for blob in children:
                client.push_blob(repo, blob, layout.blob_path(blob.digest), chunk_size, mount_from)
        # the tag goes last, and only once every blob it names is confirmed present
        missing = [
            c.digest
            for c in children
            if not (
                client.manifest_exists(repo, c.digest)
                if c.media_type in INDEX_TYPES + MANIFEST_TYPES
                else client.blob_exists(repo, c.digest)
            )
        ]
        if missing:
            raise RegistryError(
                f"{client.registry}/{repo} lost blobs during the push",
                "missing: " + ", ".join(missing),
                "rerun the push; the tag was not written",
            )
        client.put_manifest(repo, reference, desc.media_type, layout.read_blob(desc))

    push_manifest(root, ref.reference)
    client.stats.seconds = time.monotonic() - start
    return PushResult(ref, root.digest, client.stats)


def pull_layout(client: RegistryClient, ref: Reference, dest: Path, arch: str | None = None) -> Descriptor:
    """Pull one platform's image into an OCI layout at dest (written beside it, moved into place)."""
    repo = ref.repository
    media_type, body = client.get_manifest(repo, ref.reference)
    digest = sha256_digest(body)
    if ref.digest and digest != ref.digest:
        raise VerifyError(
            f"manifest of {ref} does not match its digest",
            f"received {digest}",
            "the registry serves damaged data; nothing was kept",
        )
    dest = dest.absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        layout = Layout(tmpdir)
        layout.init()
        platform = None
        want = arch  # a single manifest is checked only against an --arch the user gave
        if media_type in INDEX_TYPES:
            layout.put_bytes(body)
            index = Descriptor(media_type, digest, len(body))
            want = arch or host_arch()
            choices = layout.children(index)
            chosen = next(
                (
                    c
                    for c in choices
                    if (c.platform or {}).get("architecture") == want
                    and (c.platform or {}).get("os", "linux") == "linux"
                ),
                None,
            )
            if chosen is None:
                have = ", ".join(
                    f"{(c.platform or {}).get('os')}/{(c.platform or {}).get('architecture')}" for c in choices
                )
                raise UsageError(
                    f"{ref} has no linux/{want} image",
                    f"it has: {have}",
                    "pass --arch, or build the image for this platform",
                )
            platform = dict(chosen.platform or {})
            media_type, body = client.get_manifest(repo, chosen.digest)
            digest = sha256_digest(body)
            if digest != chosen.digest:
                raise VerifyError(
                    f"manifest {chosen.digest} of {ref} does not match its digest", f"received {digest}", ""
                )
            layout.blob_path(index.digest).unlink()
        if media_type not in MANIFEST_TYPES:
            raise VerifyError(f"{ref} is a {media_type!r}, not an image", "", "")
        layout.put_bytes(body)
        manifest = Descriptor(media_type, digest, len(body))
        children = layout.children(manifest)
        # the config first: it says what platform this is before any layer is downloaded
        client.fetch_blob(repo, children[0], layout.blob_path(children[0].digest))
        config = layout.read_json(children[0])
        check_platform(config, want, "linux", str(ref))
        for blob in children[1:]:
            client.fetch_blob(repo, blob, layout.blob_path(blob.digest))
        if platform is None:
            platform = {"architecture": str(config.get("architecture", "")), "os": str(config.get("os", ""))}
        verify_diff_ids(layout, config, children[1:])
        name = ref.tag or ref.repository.rsplit("/", 1)[-1]
        final = Descriptor(media_type, digest, len(body), platform=platform, annotations={REF_NAME: name})
        layout.write_index([final])
        _replace_dir(tmpdir, dest)
    except BaseException:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    return final


def pull_local(source: LayoutRef, dest: Path, arch: str | None = None) -> Descriptor:
    """One platform's image of a local layout, copied into a new layout at dest: the twin of pull_layout.

    The same checks as a registry pull: every blob is hashed as it is copied, the
    config's diff_ids are checked against the layers, a requested --arch against
    the config; the result is then unpacked by the same `unpack_layout`.
    """
    src = Layout(source.path)
    root = pick_root(src, source.tag or None)
    manifest = select_manifest(src, root, arch)
    if manifest.media_type not in MANIFEST_TYPES:
        raise VerifyError(f"{source} is a {manifest.media_type!r}, not an image", "", "")
    if root.media_type in INDEX_TYPES:
        plat = dict(manifest.platform or {})
    else:
        plat = {}
    dest = dest.absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        out = Layout(tmpdir)
        out.init()
        body = src.read_blob(manifest)  # verified against the digest the index names
        out.put_bytes(body)
        children = out.children(Descriptor(manifest.media_type, manifest.digest, manifest.size))
        config = src.read_json(children[0])
        out.put_bytes(src.read_blob(children[0]))
        # as pull_layout: a platform taken from an index is checked against its config too
        check_platform(config, arch or (host_arch() if root.media_type in INDEX_TYPES else None), "linux", str(source))
        for blob in children[1:]:
            _copy_verified(src, blob, out.blob_path(blob.digest))
        verify_diff_ids(out, config, children[1:])
        if not plat:
            plat = {"architecture": str(config.get("architecture", "")), "os": str(config.get("os", ""))}
        name = source.tag or root.ref_name or source.path.name
        final = Descriptor(manifest.media_type, manifest.digest, manifest.size, platform=plat, annotations={REF_NAME: name})
        out.write_index([final])
        _replace_dir(tmpdir, dest)
    except OSError as exc:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(str(dest), exc) from exc
        raise
    except BaseException:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    return final


def _copy_verified(src: Layout, desc: Descriptor, dest: Path) -> None:
    """Copy a blob, hashing what is written; refuse it unless size and digest match the descriptor."""
    path = src.blob_path(desc.digest)
    h = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f, open(dest, "wb") as out:
            while block := f.read(1 << 20):
                h.update(block)
                size += len(block)
                if size > desc.size:
                    break
                out.write(block)
    except FileNotFoundError as exc:
        raise VerifyError(
            f"blob {desc.digest} is missing from {src.path}", str(path), "rewrite or re-pull the layout"
        ) from exc
    if size != desc.size or "sha256:" + h.hexdigest() != desc.digest:
        raise VerifyError(
            f"blob {desc.digest} in {src.path} does not match its digest",
            f"it has {'more than ' if size > desc.size else ''}{size} bytes and digest sha256:{h.hexdigest()}; "
            f"expected {desc.size} bytes",
            "the layout was modified or damaged: rewrite it with `hermetic image` or pull it again; nothing was kept",
        )


def verify_diff_ids(layout: Layout, config: Mapping[str, Any], layers: Sequence[Descriptor]) -> None:
    from .unpack import layer_diff_id

    try:
        ids = [str(d) for d in config["rootfs"]["diff_ids"]]
    except (KeyError, TypeError) as exc:
        raise VerifyError("image config has no rootfs.diff_ids", str(exc), "") from exc
    if len(ids) != len(layers):
        raise VerifyError("image config and manifest disagree", f"{len(ids)} diff_ids for {len(layers)} layers", "")
    for layer, expected in zip(layers, ids, strict=True):
        actual = layer_diff_id(layout.blob_path(layer.digest), layer.media_type)
        if actual != expected:
            raise VerifyError(
                f"layer {layer.digest} does not match its diff_id",
                f"uncompressed digest {actual}, config says {expected}",
                "the image is inconsistent; nothing was kept",
            )


def make_client(
    ref: Reference, *, insecure: bool, environ: Mapping[str, str], progress: Progress | None = None, **kw: Any
) -> RegistryClient:
    return RegistryClient(
        ref.registry, insecure=insecure, credentials=find_credentials(ref.registry, environ), progress=progress, **kw
    )
