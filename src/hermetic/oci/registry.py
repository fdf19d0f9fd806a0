"""An OCI distribution client: blobs (redirects followed), manifests, tags, uploads with retries.

push and pull built on it are in transfer.py; references in reference.py; credentials and tokens in
auth.py; which URLs may be followed, TLS and bounded reads in transport.py.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import os
import ssl
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hermetic.core.errors import RegistryError, VerifyError, disk_full
from hermetic.core.names import DOCKER_HUB, DOCKER_HUB_API
from hermetic.oci.http import (
    MAX_REDIRECTS,
    PLAIN_HTTP,
    REDIRECTS,
    RETRY_STATUSES,
    TRUST_CA,
    Tokens,
    TransientRegistryError,
    basic,
    checked_url,
    document_limit,
    error_for,
    find_credentials,
    manifest_not_found,
    merge_scopes,
    no_query,
    parse_challenge,
    read_body,
    send_once,
    tls_context,
)
from hermetic.oci.progress import Progress
from hermetic.oci.types import (
    MT_DOCKER_LIST,
    MT_DOCKER_MANIFEST,
    MT_INDEX,
    MT_MANIFEST,
    parse_json,
    sha256_digest,
    split_digest,
)

if TYPE_CHECKING:
    from hermetic.oci.types import Descriptor, Reference

__all__ = ["ACCEPT", "DEFAULT_CHUNK", "Progress", "RegistryClient", "Stats", "TransientRegistryError", "make_client"]

DEFAULT_CHUNK = 16 << 20
ACCEPT = ", ".join((MT_MANIFEST, MT_INDEX, MT_DOCKER_MANIFEST, MT_DOCKER_LIST))


class _StorageFailed(TransientRegistryError):
    """The storage a blob download was redirected to failed; the download starts again at the registry."""


@dataclass
class _Response:
    status: int
    headers: Message
    body: bytes

    def header(self, name: str) -> str:
        return str(self.headers.get(name) or "")


class _Stream:
    """A response whose body the caller reads; closes the side connection of a redirect when done."""

    def __init__(self, resp: http.client.HTTPResponse, conn: http.client.HTTPConnection | None) -> None:
        self.status = resp.status
        self._resp = resp
        self._conn = conn

    def read(self, n: int) -> bytes:
        return self._resp.read(n)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


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
        ca_file: Path | None = None,
    ) -> None:
        self.registry = registry
        self.host = DOCKER_HUB_API if registry == DOCKER_HUB else registry
        self.insecure = insecure
        self.scheme = "http" if insecure else "https"
        self.credentials = credentials
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.progress = progress or Progress(enabled=False)
        self.stats = Stats()
        self.context = tls_context(ca_file)
        self.tokens = Tokens(registry, insecure, credentials, self.context, timeout)
        self._conn: http.client.HTTPConnection | None = None
        self._auth_header = ""
        # a push asks for pull,push on its repository from the first request on
        self.scopes: list[str] = []

    # -- transport ------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}"

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(self.host, timeout=self.timeout, context=self.context)
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

    def _drain(self, resp: http.client.HTTPResponse) -> None:
        """Read an answer we do not use; a long one costs the connection rather than the time to read it."""
        resp.read(1 << 16)
        if not resp.isclosed():
            self.close()

    def _target(self, url: str) -> str:
        """A path+query on our registry from a relative or absolute URL (e.g. an upload Location)."""
        full = urllib.parse.urljoin(self.base + "/", url)
        parts = urllib.parse.urlsplit(full)
        # the scheme is not compared: a registry behind a TLS proxy may name http; we stay on our connection
        if parts.netloc != self.host:
            raise RegistryError(
                f"the registry sent us to another host: {parts.netloc}",
                f"Location {no_query(url)!r}",
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
        follow: bool = False,
    ) -> _Response | _Stream:
        """One request to the registry: authentication, retries of 5xx and dropped connections, and
        (with follow, for blob GET/HEAD) redirects to the blob's storage."""
        ok = tuple(ok)
        target = self._target(url)
        shown = f"{method} {self.base}{no_query(target)}"
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
                    self._drain(resp)
                    self._authenticate(resp.getheader("WWW-Authenticate") or "", scopes, hdrs.get("Authorization", ""))
                    authed = True
                    continue
                if resp.status in RETRY_STATUSES and retry and attempt < self.retries:
                    self._drain(resp)
                    self._sleep(attempt)
                    attempt += 1
                    continue
                if follow and resp.status in REDIRECTS:
                    location = resp.getheader("Location") or ""
                    self._drain(resp)
                    return self._follow(method, self.base + target, location, ok, stream)
                if stream and resp.status in ok:
                    return _Stream(resp, None)
                # a HEAD's Content-Length is the blob's, with no body to read
                data = resp.read() if method == "HEAD" else read_body(resp, document_limit(), f"the answer to {shown}")
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
            except ssl.SSLError as exc:
                self.close()
                raise RegistryError(
                    f"TLS to {self.host} failed",
                    str(exc),
                    f"if the registry uses a private certificate authority, {TRUST_CA}; {PLAIN_HTTP}",
                ) from exc
            except VerifyError:
                self.close()  # an answer refused part way: the connection holds the rest
                raise
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if retry and attempt < self.retries:
                    self._sleep(attempt)
                    attempt += 1
                    continue
                raise TransientRegistryError(
                    f"{shown} failed",
                    f"{type(exc).__name__}: {exc}",
                    "check that the registry is up and reachable, then rerun; finished blobs are skipped",
                ) from exc
            result = _Response(resp.status, resp.headers, data)
            if resp.status not in ok:
                raise error_for(method, f"{self.base}{target}", result)
            return result

    def _follow(self, method: str, current: str, location: str, ok: tuple[int, ...], stream: bool) -> _Response | _Stream:
        """Follow the redirects of a blob GET/HEAD to its storage: https only (http with --insecure),
        at most MAX_REDIRECTS hops, the Authorization header only to the registry itself."""
        for _ in range(MAX_REDIRECTS):
            if not location:
                raise RegistryError(
                    f"{method} {no_query(current)} answered a redirect without a Location", "",
                    "the registry is misconfigured; ask its operator",
                )
            url = checked_url(urllib.parse.urljoin(current, location), insecure=self.insecure, what="the blob redirect to")
            same = (url.scheme, url.netloc) == (self.scheme, self.host)
            headers = {"Authorization": self._auth_header} if same and self._auth_header else {}
            try:
                conn, resp = send_once(url, method, headers, self.context, self.timeout)
            except ssl.SSLError as exc:
                raise RegistryError(
                    f"TLS to {url.netloc} failed (the registry sent the blob download there)",
                    str(exc),
                    f"if that storage uses a private certificate authority, {TRUST_CA}",
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                raise _StorageFailed(f"{method} {no_query(str(url))} failed", f"{type(exc).__name__}: {exc}", "rerun") from exc
            current = str(url)
            if resp.status in REDIRECTS:
                location = resp.getheader("Location") or ""
                conn.close()
                continue
            if stream and resp.status in ok:
                return _Stream(resp, conn)
            try:
                body = resp.read() if method == "HEAD" else read_body(resp, document_limit(), f"the answer of {url.netloc}")
                result = _Response(resp.status, resp.headers, body)
            finally:
                conn.close()
            if resp.status in RETRY_STATUSES:
                raise _StorageFailed(f"{method} {no_query(current)} answered {resp.status}", "", "rerun later")
            if resp.status not in ok:
                raise error_for(method, current, result)
            return result
        raise RegistryError(
            f"{method} of a blob was redirected more than {MAX_REDIRECTS} times",
            f"the last hop was {no_query(current)}",
            "the registry or its storage is misconfigured (a redirect loop); ask its operator",
        )

    # -- authentication ---------------------------------------------------------
    def _authenticate(self, challenge: str, scopes: Sequence[str], sent: str) -> None:
        scheme, params = parse_challenge(challenge)
        if scheme == "basic":
            if not self.credentials:
                raise RegistryError(
                    f"{self.registry} requires a login",
                    "it asked for Basic authentication and no credentials were found",
                    "log in with `podman login`/`skopeo login`/`docker login`, or set HERMETIC_REGISTRY_USER and HERMETIC_REGISTRY_PASSWORD",
                )
            self._auth_header = basic(self.credentials)
            return
        if scheme == "bearer":
            if sent.startswith("Bearer "):
                self.tokens.forget(sent.removeprefix("Bearer "))  # expired or revoked: ask again once
            challenged = params["scope"].split(" ") if params.get("scope") else []
            wanted = merge_scopes([*self.scopes, *challenged, *scopes])
            self._auth_header = "Bearer " + self.tokens.token(params, wanted)
            return
        raise RegistryError(
            f"{self.registry} asked for unsupported authentication {scheme or '(none)'!r}",
            f"WWW-Authenticate: {challenge[:200]!r}",
            "hermetic supports Basic and Bearer token authentication",
        )

    # -- blobs --------------------------------------------------------------------
    def blob_exists(self, repo: str, digest: str) -> bool:
        resp = self.request(
            "HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404), scopes=[f"repository:{repo}:pull"], follow=True
        )
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
                    raise RegistryError(f"{self.registry} started an upload without a Location", "", "the registry does not follow the distribution spec; ask its operator")
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
                    raise TransientRegistryError("the registry lost track of the upload", "416 on PATCH", "rerun the push")
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
            raise TransientRegistryError("the registry sent no upload range", resp.header("Range"), "rerun the push") from None
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
                    "GET", f"/v2/{repo}/blobs/{desc.digest}", ok=(200,), scopes=[f"repository:{repo}:pull"],
                    stream=True, follow=True,
                )
                if isinstance(resp, _Response):  # not reached: stream=True returns a stream
                    raise RegistryError("internal: expected a streamed response", "", "report this as a bug of hermetic")
                try:
                    self._download(resp, desc, tmp, f"{self.registry}/{repo}", label)
                finally:
                    resp.close()
                os.replace(tmp, dest)
                return
            except (OSError, http.client.HTTPException, _StorageFailed) as exc:
                self.close()
                tmp.unlink(missing_ok=True)
                if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                    raise disk_full(str(dest), exc) from exc  # retrying cannot help
                if attempt == self.retries:
                    if isinstance(exc, _StorageFailed):
                        raise
                    raise TransientRegistryError(
                        f"downloading {desc.digest} failed", str(exc), "rerun the pull"
                    ) from exc
                self._sleep(attempt)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise

    def _download(self, resp: _Stream, desc: Descriptor, tmp: Path, where: str, label: str) -> None:
        h = hashlib.sha256()
        size = 0
        self.progress.start(label, desc.size)
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
                f"blob {desc.digest} from {where} does not match its digest",
                f"received {'more than ' if size > desc.size else ''}{size} bytes (expected {desc.size}) "
                f"with digest sha256:{h.hexdigest()}",
                "the registry (or the storage it redirected to) serves damaged data; nothing was kept",
            )
        self.progress.finish()

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
            raise manifest_not_found(self.registry, repo, reference, resp.body, self.list_tags)
        media_type = resp.header("Content-Type").split(";")[0].strip()
        doc = parse_json(resp.body, f"manifest {self.registry}/{repo}:{reference}")
        if not isinstance(doc, dict):
            raise VerifyError(
                f"manifest {self.registry}/{repo}:{reference} is not a JSON object", "", "the registry serves damaged data"
            )
        media_type = str(doc.get("mediaType") or media_type)
        return media_type, resp.body

    def list_tags(self, repo: str) -> list[str] | None:
        """The repository's tags, or None when the registry says the repository does not exist."""
        resp = self.request("GET", f"/v2/{repo}/tags/list", ok=(200, 404), scopes=[f"repository:{repo}:pull"])
        assert isinstance(resp, _Response)
        if resp.status == 404:
            return None
        doc = parse_json(resp.body, f"the tag list of {self.registry}/{repo}")
        tags = doc.get("tags") if isinstance(doc, dict) else None
        if not isinstance(tags, list) and tags is not None:
            raise RegistryError(f"{self.registry}/{repo}: the tag list is not a list", "", "the registry serves damaged data; ask its operator")
        return [str(t) for t in tags or []]

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


def make_client(
    ref: Reference, *, insecure: bool, environ: Mapping[str, str], progress: Progress | None = None, **kw: Any
) -> RegistryClient:
    return RegistryClient(
        ref.registry, insecure=insecure, credentials=find_credentials(ref.registry, environ), progress=progress, **kw
    )
