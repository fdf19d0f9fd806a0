"""Registries as they are in the wild, for tests: TLS with a test CA, htpasswd, a token server, blob redirects.

Starters only (a plain module, importable by any tier); nothing here is installed into the machine:
the CA is trusted per process (SSL_CERT_FILE, --ca, or --cert-dir for skopeo and buildah).

- `LocalCA`: a certificate authority made with `cryptography`, and a server certificate for 127.0.0.1,
  127.0.0.2 and localhost signed by it.
- `htpasswd`: an htpasswd file with bcrypt hashes (PyPI `bcrypt`), the only kind distribution accepts.
- `RealRegistry`: Debian's docker-registry serving https with that certificate, with htpasswd or token auth.
- `TokenServer`: a token service per the distribution token spec (https), issuing RS256 JWTs whose x5c
  chain the registry checks against the test CA; anonymous pulls of `public` repositories only.
- `RedirectProxy` + `BlobStore`: a proxy in front of a registry that answers blob GET/HEAD with 307 to a
  second host (127.0.0.2), which serves the blob from the registry's storage as S3 would: by a signed,
  expiring URL, no Authorization header wanted; both record what they were sent.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import http.client
import http.server
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from devtools.servers import free_port, registry_config

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"
SERVICE = "hermetic-test-registry"
ISSUER = "hermetic-test-issuer"
HOSTS = ("127.0.0.1", "127.0.0.2", "localhost")


# -- the test CA ------------------------------------------------------------------------------------------


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass
class LocalCA:
    """A CA and a server certificate signed by it, as PEM files in `base`."""

    base: Path
    ca_cert: Path = field(init=False)
    server_cert: Path = field(init=False)
    server_key: Path = field(init=False)
    cert_dir: Path = field(init=False)  # for skopeo/buildah --cert-dir: the CA as ca.crt, nothing else

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ca = (
            x509.CertificateBuilder()
            .subject_name(_name("hermetic test CA")).issuer_name(_name("hermetic test CA"))
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        sans: list[x509.GeneralName] = [x509.DNSName("localhost")]
        sans += [x509.IPAddress(ipaddress.ip_address(h)) for h in HOSTS if h != "localhost"]
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        self.ca_cert = self.base / "ca.pem"
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.server_cert = self.base / "server.pem"
        self.server_cert.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.server_key = self.base / "server.key"
        self.server_key.write_bytes(self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.cert_dir = self.base / "certs.d"
        self.cert_dir.mkdir(exist_ok=True)
        shutil.copyfile(self.ca_cert, self.cert_dir / "ca.crt")

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.server_cert), str(self.server_key))
        return ctx

    def sign_jwt(self, claims: dict[str, Any]) -> str:
        """An RS256 JWT signed by the server key, its certificate in x5c (the registry checks it against the CA)."""
        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        signing = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing + "." + b64(signature)


def htpasswd(path: Path, users: dict[str, str]) -> Path:
    """An htpasswd file of bcrypt hashes (what `htpasswd -B` writes)."""
    path.write_text("".join(f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=5)).decode()}\n"
                            for u, p in users.items()))
    return path


# -- the real registry, with TLS and auth ------------------------------------------------------------------


class RealRegistry:
    """Debian's docker-registry on https://127.0.0.1:PORT with the test CA's certificate and the given auth."""

    def __init__(self, base: Path, ca: LocalCA, auth: str) -> None:
        self.base, self.ca = base, ca
        self.port = free_port()
        self.storage = base / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.log = base / "registry.log"
        self.proc: subprocess.Popen[bytes] | None = None
        (base / "config.yml").write_text(registry_config(
            self.storage, self.port,
            http_extra=f"  tls:\n    certificate: {ca.server_cert}\n    key: {ca.server_key}\nauth:\n{auth}",
        ))

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(self.base / "config.yml")], stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited:\n{self.log.read_text()[-2000:]}")
            conn = http.client.HTTPSConnection(self.host, timeout=2, context=self.ca.client_context())
            try:
                conn.request("GET", "/v2/")
                if conn.getresponse().status in (200, 401):
                    return
            except OSError:
                time.sleep(0.1)
            finally:
                conn.close()
        raise RuntimeError(f"docker-registry did not answer on {self.host}:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def blob_file(self, digest: str) -> Path:
        hexd = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


def htpasswd_auth(path: Path) -> str:
    return f"  htpasswd:\n    realm: hermetic-test\n    path: {path}\n"


def token_auth(realm: str, ca: LocalCA) -> str:
    return (f"  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n"
            f"    rootcertbundle: {ca.ca_cert}\n")


@contextmanager
def running(reg: RealRegistry) -> Iterator[RealRegistry]:
    reg.start()
    try:
        yield reg
    finally:
        reg.stop()


# -- in-process https servers ------------------------------------------------------------------------------


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, handler: type[http.server.BaseHTTPRequestHandler], tls: ssl.SSLContext | None) -> None:
        super().__init__((host, 0), handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.seen: list[tuple[str, str, dict[str, str]]] = []  # (method, path, headers)

    @property
    def host(self) -> str:
        addr, port = self.socket.getsockname()[:2]
        return f"{addr}:{port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def reply(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def note(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers.items())))


# -- the token service ------------------------------------------------------------------------------------


class TokenServer(_Server):
    """GET /token?service=…&scope=…: a JWT granting the requested actions to a known user (Basic auth),
    and `pull` on the repositories in `public` to anyone; 401 for wrong credentials."""

    def __init__(self, ca: LocalCA, users: dict[str, str], public: set[str], lifetime: int = 300,
                 tls: bool = True) -> None:
        super().__init__("127.0.0.1", _TokenHandler, ca.server_context() if tls else None)
        self.ca, self.users, self.public, self.lifetime = ca, users, public, lifetime
        self.issued: list[dict[str, Any]] = []

    @property
    def realm(self) -> str:
        return f"{self.url}/token"


class _TokenHandler(_Handler):
    server: TokenServer

    def do_GET(self) -> None:
        self.note()
        path, _, query = self.path.partition("?")
        if path != "/token":
            return self.reply(404)
        params = urllib.parse.parse_qs(query)
        user = ""
        auth = self.headers.get("Authorization", "")
        if auth:
            name, _, password = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
            if self.server.users.get(name) != password:
                return self.reply(401, b'{"details":"wrong credentials"}', {"Content-Type": "application/json"})
            user = name
        access = []
        for scope in params.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            wanted = [a for a in actions.split(",") if a]
            granted = wanted if user else [a for a in wanted if a == "pull" and name in self.server.public]
            if granted:
                access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": user, "aud": params.get("service", [""])[0], "exp": now + self.server.lifetime,
                  "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(), "access": access}
        self.server.issued.append({"user": user, "access": access, "scopes": params.get("scope", [])})
        body = json.dumps({"token": self.server.ca.sign_jwt(claims), "expires_in": self.server.lifetime}).encode()
        self.reply(200, body, {"Content-Type": "application/json"})


# -- blob redirects ---------------------------------------------------------------------------------------


class BlobStore(_Server):
    """The storage a registry redirects blob downloads to, on another host (127.0.0.2): serves
    /blobs/sha256:HEX?expires=…&sig=… from the registry's storage when the signature holds, as a presigned
    S3 URL would; `bounce` answers that many requests with another redirect to itself first."""

    def __init__(self, registry: RealRegistry, secret: bytes, tls: ssl.SSLContext | None) -> None:
        super().__init__("127.0.0.2", _BlobHandler, tls)
        self.registry, self.secret = registry, secret
        self.bounce = 0
        self.corrupt = False

    def sign(self, path: str, expires: int) -> str:
        return hmac.new(self.secret, f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()


class _BlobHandler(_Handler):
    server: BlobStore

    def handle_blob(self) -> None:
        self.note()
        path, _, query = self.path.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        expires = int(params.get("expires", "0"))
        if not hmac.compare_digest(params.get("sig", ""), self.server.sign(path, expires)) or expires < time.time():
            return self.reply(403, b"<Error><Code>AccessDenied</Code></Error>")
        if self.server.bounce > 0:
            self.server.bounce -= 1
            return self.reply(307, b"", {"Location": self.path})
        digest = path.rsplit("/", 1)[-1]
        try:
            data = self.server.registry.blob_file(digest).read_bytes()
        except FileNotFoundError:
            return self.reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
        if self.server.corrupt:
            data = data[:-1] + bytes([data[-1] ^ 1])
        self.reply(200, data, {"Content-Type": "application/octet-stream"})

    do_GET = do_HEAD = handle_blob


class RedirectProxy(_Server):
    """In front of a registry: blob GET/HEAD that the registry would answer 200 are answered 307 to the blob
    store (a signed URL); everything else is forwarded as it is. `location` overrides where blobs are sent."""

    def __init__(self, registry: RealRegistry, store: BlobStore, tls: ssl.SSLContext | None) -> None:
        super().__init__("127.0.0.1", _ProxyHandler, tls)
        self.registry, self.store = registry, store
        self.location: str | None = None

    def signed_url(self, digest: str) -> str:
        path = f"/blobs/{digest}"
        expires = int(time.time()) + 300
        return f"{self.store.url}{path}?expires={expires}&sig={self.store.sign(path, expires)}"


class _ProxyHandler(_Handler):
    server: RedirectProxy

    def _upstream(self, method: str, body: bytes | None) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPSConnection(self.server.registry.host, timeout=60,
                                           context=self.server.registry.ca.client_context())
        try:
            # a header sent several times (skopeo's Accept) goes on as one, its values joined
            headers = {k: ", ".join(self.headers.get_all(k) or []) for k in dict.fromkeys(self.headers.keys())
                       if k.lower() not in ("connection", "host")}
            conn.request(method, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def forward(self) -> None:
        self.note()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        parts = self.path.split("?")[0].split("/")
        blob = self.command in ("GET", "HEAD") and len(parts) >= 4 and parts[-2] == "blobs"
        # a blob download is checked (auth, existence) by the registry with HEAD, then sent to the store
        status, headers, data = self._upstream("HEAD" if blob else self.command, body)
        if blob and status == 200:
            return self.reply(307, b"", {"Location": self.server.location or self.server.signed_url(parts[-1]),
                                         "Docker-Distribution-Api-Version": "registry/2.0"})
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v.replace(self.server.registry.host, self.server.host))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = forward
