"""Registries as they are in the wild, with the real parts: Debian's docker-registry behind TLS (a test CA)
with htpasswd or token auth, a token server, and blob downloads redirected to another host.

hermetic, skopeo and buildah push and pull both ways and must agree on every digest. No LLVM build: the
image is a small one written here, so this module runs in about a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.registry_servers import (
    BlobStore,
    LocalCA,
    RealRegistry,
    RedirectProxy,
    TokenServer,
    htpasswd,
    htpasswd_auth,
    running,
    token_auth,
)
from devtools.servers import serving
from hermetic.oci.layer import write_layer
from hermetic.oci.layout import Layout
from hermetic.oci.types import MT_CONFIG, MT_MANIFEST, REF_NAME, Descriptor, canonical_json

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "builder", "correct horse battery"


def hermetic(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HERMETIC_", "REGISTRY_AUTH", "SSL_CERT"))}
    base["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "hermetic", *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=300)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    return proc.stdout


def refused(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert proc.returncode == code, f"{proc.args}: exit {proc.returncode}, expected {code}:\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr and "fix:" in proc.stderr, proc.stderr
    for w in words:
        assert w in proc.stderr, f"{w!r} not in:\n{proc.stderr}"
    return proc.stderr


def tool(*argv: str) -> str:
    if shutil.which(argv[0]) is None:
        pytest.fail(f"{argv[0]} is missing: install Debian's {argv[0]} package (.ci/setup does)")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


CREDS = {"HERMETIC_REGISTRY_USER": USER, "HERMETIC_REGISTRY_PASSWORD": PASSWORD}


# -- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return LocalCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real image: a prefix with a file, an executable and a symlink, gzip layer, amd64."""
    base = tmp_path_factory.mktemp("tiny")
    top = base / "root/usr/lib64/tiny"
    (top / "bin").mkdir(parents=True)
    (top / "README").write_text("tiny\n" * 100)
    (top / "bin/tool").write_text("#!/bin/sh\necho tiny\n")
    (top / "bin/tool").chmod(0o755)
    os.symlink("bin/tool", top / "tool")
    layout = Layout(base / "layout")
    layout.init()
    tmp = base / "layer"
    with open(tmp, "wb") as f:
        layer = write_layer(f, base / "root", "usr/lib64/tiny", 1736899200)
    os.replace(tmp, layout.blob_path(layer.digest))
    config = canonical_json({"architecture": "amd64", "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]}})
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": layout.put_bytes(config), "size": len(config)},
        "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}],
    })
    layout.write_index([Descriptor(MT_MANIFEST, layout.put_bytes(manifest), len(manifest),
                                   {"architecture": "amd64", "os": "linux"}, {REF_NAME: "tiny"})])
    return layout.path


def digest_of(layout: Path) -> str:
    return Layout(layout).index()[0].digest


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory: pytest.TempPathFactory, ca: LocalCA) -> Iterator[RealRegistry]:
    """https + htpasswd (bcrypt, made with PyPI bcrypt)."""
    base = tmp_path_factory.mktemp("basic-registry")
    users = htpasswd(base / "htpasswd", {USER: PASSWORD})
    with running(RealRegistry(base, ca, htpasswd_auth(users))) as reg:
        yield reg


@pytest.fixture(scope="module")
def token_server(ca: LocalCA) -> Iterator[TokenServer]:
    with serving(TokenServer(ca, {USER: PASSWORD}, public={"public/tiny"})) as server:
        yield server


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory, ca: LocalCA, token_server: TokenServer) -> Iterator[RealRegistry]:
    base = tmp_path_factory.mktemp("token-registry")
    with running(RealRegistry(base, ca, token_auth(token_server.realm, ca))) as reg:
        yield reg


@pytest.fixture
def buildah(tmp_path: Path) -> Iterator[list[str]]:
    """buildah with a store of the test's own (vfs), emptied afterwards."""
    if shutil.which("buildah") is None:
        pytest.fail("buildah is missing: install Debian's buildah package (.ci/setup does)")
    store = ["buildah", "--root", str(tmp_path / "storage"), "--runroot", str(tmp_path / "run"), "--storage-driver", "vfs"]
    yield store
    subprocess.run([*store, "rm", "--all"], capture_output=True, timeout=120)
    subprocess.run([*store, "rmi", "--all", "--force"], capture_output=True, timeout=120)


# -- TLS + htpasswd: hermetic, skopeo and buildah both ways ---------------------------------------------


def test_hermetic_push_is_what_skopeo_and_buildah_pull(
    basic_registry: RealRegistry, ca: LocalCA, image: Path, buildah: list[str], tmp_path: Path
) -> None:
    ref = f"{basic_registry.host}/wild/tiny:1"
    out = ok(hermetic("push", str(image), ref, "--ca", str(ca.ca_cert), "--no-attestations", env=CREDS))
    assert out.split()[1] == digest_of(image)
    creds = f"{USER}:{PASSWORD}"
    tool("skopeo", "copy", "--src-cert-dir", str(ca.cert_dir), "--src-creds", creds, f"docker://{ref}",
         f"oci:{tmp_path / 'by-skopeo'}:tiny")
    assert digest_of(tmp_path / "by-skopeo") == digest_of(image)
    tool(*buildah, "pull", "--cert-dir", str(ca.cert_dir), "--creds", creds, f"docker://{ref}")
    images = json.loads(tool(*buildah, "images", "--json"))
    assert [i["digest"] for i in images] == [digest_of(image)]


def test_skopeo_and_buildah_pushes_are_what_hermetic_pulls(
    basic_registry: RealRegistry, ca: LocalCA, image: Path, buildah: list[str], tmp_path: Path
) -> None:
    creds = f"{USER}:{PASSWORD}"
    by_skopeo = f"{basic_registry.host}/wild/from-skopeo:1"
    tool("skopeo", "copy", "--dest-cert-dir", str(ca.cert_dir), "--dest-creds", creds,
         "--digestfile", str(tmp_path / "skopeo.digest"), f"oci:{image}:tiny", f"docker://{by_skopeo}")
    ctr = tool(*buildah, "from", "scratch").strip()
    (tmp_path / "hello").write_text("from buildah\n")
    tool(*buildah, "copy", ctr, str(tmp_path / "hello"), "/hello")
    tool(*buildah, "commit", ctr, "localhost/from-buildah")
    by_buildah = f"{basic_registry.host}/wild/from-buildah:1"
    tool(*buildah, "push", "--cert-dir", str(ca.cert_dir), "--creds", creds, "--digestfile",
         str(tmp_path / "buildah.digest"), "localhost/from-buildah", f"docker://{by_buildah}")
    # the CA trusted the other way this time: through the environment, as for any Python program
    env = {**CREDS, "SSL_CERT_FILE": str(ca.ca_cert)}
    for ref, digest_file in ((by_skopeo, "skopeo.digest"), (by_buildah, "buildah.digest")):
        dest = tmp_path / digest_file.replace(".digest", "-root")
        out = ok(hermetic("pull", ref, "--unpack", str(dest), env=env))
        assert out.split()[1] == (tmp_path / digest_file).read_text().strip()
    assert (tmp_path / "buildah-root/hello").read_text() == "from buildah\n"
    assert (tmp_path / "skopeo-root/usr/lib64/tiny/tool").is_symlink()


def test_tls_and_login_refusals_say_what_to_do(basic_registry: RealRegistry, ca: LocalCA, image: Path, tmp_path: Path) -> None:
    ref = f"{basic_registry.host}/wild/tiny:refused"
    refused(hermetic("push", str(image), ref, env=CREDS), 7, "TLS to", "--ca")
    refused(hermetic("push", str(image), ref, "--ca", str(ca.ca_cert)), 7, "requires a login")
    wrong = {"HERMETIC_REGISTRY_USER": USER, "HERMETIC_REGISTRY_PASSWORD": "wrong"}
    refused(hermetic("push", str(image), ref, "--ca", str(ca.ca_cert), env=wrong), 7, "answered 401", "log in")
    # skopeo's own login file is read too
    authfile = tmp_path / "auth.json"
    tool("skopeo", "login", "--cert-dir", str(ca.cert_dir), "--authfile", str(authfile), "-u", USER, "-p", PASSWORD,
         basic_registry.host)
    ok(hermetic("push", str(image), ref, "--ca", str(ca.ca_cert), "--no-attestations",
                env={"REGISTRY_AUTH_FILE": str(authfile)}))


# -- token auth, per the distribution token spec ----------------------------------------------------------


def test_token_push_pull_mount_and_anonymous_pull(
    token_registry: RealRegistry, token_server: TokenServer, ca: LocalCA, image: Path, tmp_path: Path
) -> None:
    host = token_registry.host
    cafile = ["--ca", str(ca.ca_cert)]
    ok(hermetic("push", str(image), f"{host}/private/tiny:1", *cafile, "--no-attestations", env=CREDS))
    assert any(s == ["repository:private/tiny:pull,push"] for s in (i["scopes"] for i in token_server.issued))
    # a cross-repository mount asks for pull on the source and pull,push on the target, in one token
    token_server.issued.clear()
    mounted = hermetic("push", str(image), f"{host}/public/tiny:1", *cafile, "--mount-from", "private/tiny",
                       "--no-attestations", env=CREDS)
    ok(mounted)
    assert "2 mounted" in mounted.stderr
    assert any({"repository:public/tiny:pull,push", "repository:private/tiny:pull"} <= set(i["scopes"])
               for i in token_server.issued)
    # anonymous: a token without credentials, for pull of the public repository only
    token_server.seen.clear()
    ok(hermetic("pull", f"{host}/public/tiny:1", "--layout", str(tmp_path / "anon"), *cafile))
    assert digest_of(tmp_path / "anon") == digest_of(image)
    assert token_server.seen and all("Authorization" not in h for _, _, h in token_server.seen)
    refused(hermetic("pull", f"{host}/private/tiny:1", "--layout", str(tmp_path / "no"), *cafile), 7)
    assert not (tmp_path / "no").exists()
    # skopeo reads what hermetic pushed through the same token service
    tool("skopeo", "copy", "--src-cert-dir", str(ca.cert_dir), "--src-creds", f"{USER}:{PASSWORD}",
         f"docker://{host}/private/tiny:1", f"oci:{tmp_path / 'by-skopeo'}:tiny")
    assert digest_of(tmp_path / "by-skopeo") == digest_of(image)


def test_plain_http_realm_is_refused_and_never_asked(
    tmp_path: Path, ca: LocalCA, image: Path
) -> None:
    """A registry on https whose token service is plain http: without --insecure hermetic refuses the realm
    before sending it anything (credentials included)."""
    with serving(TokenServer(ca, {USER: PASSWORD}, public=set(), tls=False)) as plain:
        with running(RealRegistry(tmp_path / "reg", ca, token_auth(plain.realm, ca))) as reg:
            err = refused(hermetic("push", str(image), f"{reg.host}/x/tiny:1", "--ca", str(ca.ca_cert), env=CREDS),
                          7, "refusing the token service", "plain http")
            assert plain.realm in err
        assert plain.seen == []


# -- blob downloads redirected to another host ------------------------------------------------------------


@pytest.fixture
def redirecting(basic_registry: RealRegistry, ca: LocalCA, image: Path) -> Iterator[RedirectProxy]:
    """The htpasswd registry behind a proxy that sends blob downloads to a store on 127.0.0.2 (https)."""
    ok(hermetic("push", str(image), f"{basic_registry.host}/redirect/tiny:1", "--ca", str(ca.ca_cert),
                "--no-attestations", env=CREDS))
    store = BlobStore(basic_registry, os.urandom(16), ca.server_context())
    with serving(store), serving(RedirectProxy(basic_registry, store, ca.server_context())) as proxy:
        yield proxy


def test_redirected_blobs_are_fetched_without_credentials(
    redirecting: RedirectProxy, ca: LocalCA, image: Path, tmp_path: Path
) -> None:
    store = redirecting.store
    store.bounce = 2  # two more hops on the storage side, as some CDNs do
    ref = f"{redirecting.host}/redirect/tiny:1"
    out = ok(hermetic("pull", ref, "--unpack", str(tmp_path / "root"), "--ca", str(ca.ca_cert), env=CREDS))
    assert out.split()[1] == digest_of(image)
    assert (tmp_path / "root/usr/lib64/tiny/bin/tool").read_text() == "#!/bin/sh\necho tiny\n"
    gets = [(m, p) for m, p, _ in store.seen if p.startswith("/blobs/")]
    assert len(gets) >= 4  # config and layer, each over three hops
    assert all("Authorization" not in h for _, _, h in store.seen), "credentials went to the storage host"
    assert any("Authorization" in h for _, _, h in redirecting.seen)  # but they did go to the registry
    # skopeo takes the same redirects (the proxy behaves as hosted registries do)
    tool("skopeo", "copy", "--src-cert-dir", str(ca.cert_dir), "--src-creds", f"{USER}:{PASSWORD}",
         f"docker://{ref}", f"oci:{tmp_path / 'by-skopeo'}:tiny")
    assert digest_of(tmp_path / "by-skopeo") == digest_of(image)


def test_redirect_refusals(redirecting: RedirectProxy, ca: LocalCA, tmp_path: Path) -> None:
    ref = f"{redirecting.host}/redirect/tiny:1"
    args = ["--ca", str(ca.ca_cert)]
    redirecting.location = "http://127.0.0.2:9/blobs/x"
    refused(hermetic("pull", ref, "--layout", str(tmp_path / "a"), *args, env=CREDS), 7, "plain http")
    redirecting.location = "file:///etc/passwd"
    refused(hermetic("pull", ref, "--layout", str(tmp_path / "a"), *args, env=CREDS), 7, "'file'")
    redirecting.location = None
    redirecting.store.bounce = 100
    refused(hermetic("pull", ref, "--layout", str(tmp_path / "a"), *args, env=CREDS), 7, "more than 5 times")
    redirecting.store.bounce = 0
    redirecting.store.corrupt = True
    refused(hermetic("pull", ref, "--unpack", str(tmp_path / "a" / "b"), *args, env=CREDS), 8, "does not match its digest")
    assert not (tmp_path / "a").exists()
