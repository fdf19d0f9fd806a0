"""Signatures consumers' own tools enforce: Debian's skopeo and buildah with a signature policy, against the real
registry. Accepted: the image its builder signed; refused: an unsigned one, a tampered one, one signed by another
key; with one requirement per builder, an image only one of two builders signed. The images are the tiny
recipe's real builds."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import hermetic, tampered_record
from hermetic.attest import image_signatures, signing
from hermetic.attest.simple_signing import lookaside_dir
from hermetic.oci.image import ImageResult, spec_from_record, write_image
from hermetic.oci.registry import RegistryClient

pytestmark = pytest.mark.integration

Registry = object  # the fixture class in conftest.py

# Each image the consumer's tools must refuse under policy("a"), and what containers/image says about it.
REFUSALS = [
    ("unsigned:1", "A signature was required, but no signature exists"),
    ("other:1", "Invalid GPG signature"),
    ("tampered:1", "does not match"),
]


@dataclass(frozen=True)
class World:
    base: Path
    host: str
    good: Path  # the signed image's layout
    good_digest: str
    registries_d: Path
    look: Path
    record: Path  # the tiny build the image holds
    prefix: str

    def key(self, name: str) -> Path:
        return self.base / name

    def policy(self, *builders: str) -> Path:
        """policy.json: reject everything, except images of our registry signed by each named builder."""
        path = self.base / f"policy-{'-'.join(builders)}.json"
        reqs = [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": str(self.key(f"{b}.gpg.pub"))} for b in builders]
        path.write_text(json.dumps({"default": [{"type": "reject"}], "transports": {"docker": {self.host: reqs}}}))
        return path


def _image(record: Path, out: Path) -> ImageResult:
    return write_image(spec_from_record(record), out)


def _changed(record: Path, base: Path) -> ImageResult:
    """The image of a copy of the tree with one byte of one header changed (what a tamperer would publish)."""
    return _image(tampered_record(record, base), base / "image")


def _own_build(base: Path, tiny: tuple[str, ...], cache: Path) -> ImageResult:
    """Another builder's build of the same inputs, in a work dir of its own, and its image."""
    hermetic("build", "llvm", *tiny, "--variant", "support", "--toolchain", "host", "--work-dir", str(base / "w"),
             "--cache", str(cache), "--quiet")
    return _image(next((base / "w").rglob("record.json")), base / "image")


def _push(*args: str) -> str:
    return hermetic("push", *args, "--insecure", "--quiet").stdout


@pytest.fixture(scope="module")
def world(registry: Registry, tiny_install: Path, tmp_path_factory: pytest.TempPathFactory) -> World:
    if shutil.which("gpg") is None:
        pytest.fail("gpg is missing: install Debian's gnupg package (.ci/setup does)")
    base = tmp_path_factory.mktemp("signing")
    host = registry.host  # type: ignore[attr-defined]
    for name in ("a", "b"):
        hermetic("key", "generate", str(base / name), "--quiet")
    look = base / "lookaside"
    good = _image(tiny_install, base / "good")
    sign_a = ("--sign-key", str(base / "a.key"), "--gpg-key", str(base / "a.gpg.key"), "--lookaside", str(look))
    sign_b = ("--sign-key", str(base / "b.key"), "--gpg-key", str(base / "b.gpg.key"), "--lookaside", str(look))
    _push(str(good.layout), f"{host}/signed/tiny:1", *sign_a)
    _push(str(good.layout), f"{host}/signed/other:1", *sign_b)
    _push(str(good.layout), f"{host}/signed/unsigned:1")
    # Tampered: the signed image's tag moved to a changed image, and the signature copied to the new digest.
    _push(str(good.layout), f"{host}/signed/tampered:1", *sign_a)
    changed = _changed(tiny_install, base / "changed")
    _push(str(changed.layout), f"{host}/signed/tampered:1")
    old, new = (lookaside_dir(look, "signed/tampered", d) for d in (good.manifest.digest, changed.manifest.digest))
    shutil.copytree(old, new)
    rd = base / "registries.d"
    rd.mkdir()
    (rd / "hermetic-test.yaml").write_text(
        f"docker:\n  {host}:\n    lookaside: file://{look}\n    use-sigstore-attachments: true\n"
    )
    prefix = json.loads(tiny_install.read_text())["prefix"]
    return World(base, host, good.layout, good.manifest.digest, rd, look, tiny_install, prefix)


def skopeo_copy(w: World, policy: Path, repo: str, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["skopeo", "--policy", str(policy), "--registries.d", str(w.registries_d), "copy", "--remove-signatures",
         "--src-tls-verify=false", f"docker://{w.host}/signed/{repo}", f"oci:{dest}"],
        capture_output=True, text=True, timeout=300,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[list[str]]:
    """A buildah store of the test's own: a pulled image cannot satisfy a later policy from the cache."""
    opts = ["--root", str(tmp_path / "s"), "--runroot", str(tmp_path / "r"), "--storage-driver", "vfs"]
    yield opts
    subprocess.run(["buildah", *opts, "rm", "--all"], capture_output=True, timeout=120)
    subprocess.run(["buildah", *opts, "rmi", "--all", "--force"], capture_output=True, timeout=120)


def buildah_copy_from(w: World, store: list[str], policy: Path, repo: str, ctx: Path) -> subprocess.CompletedProcess[str]:
    """A consumer's `buildah bud` whose Containerfile takes the prefix out of our image with COPY --from."""
    ctx.mkdir()
    (ctx / "Containerfile").write_text(f"FROM scratch\nCOPY --from={w.host}/signed/{repo} {w.prefix} {w.prefix}\n")
    return subprocess.run(
        # debug: buildah reports a refused COPY --from image as "not found"; the policy's reason is in the debug log
        ["buildah", *store, "--log-level", "debug", "--registries-conf-dir", str(w.registries_d), "bud",
         "--signature-policy", str(policy),
         "--isolation", "chroot", "--tls-verify=false", "-t", "consumer", str(ctx)],
        capture_output=True, text=True, timeout=600,
    )


def test_skopeo_accepts_the_signed_image(world: World, tmp_path: Path) -> None:
    proc = skopeo_copy(world, world.policy("a"), "tiny:1", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["manifests"][0]["digest"] == world.good_digest


@pytest.mark.parametrize(("repo", "why"), REFUSALS)
def test_skopeo_refuses(world: World, tmp_path: Path, repo: str, why: str) -> None:
    proc = skopeo_copy(world, world.policy("a"), repo, tmp_path / "out")
    assert proc.returncode != 0, f"skopeo accepted {repo}"
    assert "Source image rejected" in proc.stderr and why in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "index.json").exists()


def test_buildah_copy_from_accepts_the_signed_image(world: World, store: list[str], tmp_path: Path) -> None:
    proc = buildah_copy_from(world, store, world.policy("a"), "tiny:1", tmp_path / "ctx")
    assert proc.returncode == 0, proc.stderr
    ctr = subprocess.run(["buildah", *store, "from", "consumer"], capture_output=True, text=True, check=True).stdout.strip()
    mnt = Path(subprocess.run(["buildah", *store, "mount", ctr], capture_output=True, text=True, check=True).stdout.strip())
    install = Path(json.loads(world.record.read_text())["install_root"])
    header = next(p for p in sorted(install.rglob("*.h")) if p.is_file())
    assert (mnt / header.relative_to(install)).read_bytes() == header.read_bytes()


@pytest.mark.parametrize(("repo", "why"), REFUSALS)
def test_buildah_copy_from_refuses(world: World, store: list[str], tmp_path: Path, repo: str, why: str) -> None:
    proc = buildah_copy_from(world, store, world.policy("a"), repo, tmp_path / "ctx")
    assert proc.returncode != 0, f"buildah built from {repo}"
    assert "Source image rejected" in proc.stderr and why in proc.stderr, proc.stderr[-3000:]


@pytest.fixture
def podman_store() -> Iterator[list[str]]:
    """A podman store of the test's own, under a short path (podman refuses a runroot over 50 characters)."""
    base = Path(tempfile.mkdtemp(prefix="hp-", dir="/tmp"))
    opts = ["--root", str(base / "s"), "--runroot", str(base / "r"), "--storage-driver", "vfs"]
    yield opts
    subprocess.run(["podman", *opts, "rmi", "--all", "--force"], capture_output=True, timeout=120)
    shutil.rmtree(base, ignore_errors=True)


def podman_pull(w: World, store: list[str], policy: Path, repo: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`podman pull` as a consumer configures it: policy.json and registries.d under /etc/containers, here in a
    mount namespace of its own where a copy of the machine's /etc/containers with ours added is bound over it."""
    etc = tmp_path / "etc-containers"
    shutil.copytree("/etc/containers", etc, symlinks=True)
    shutil.copyfile(policy, etc / "policy.json")
    shutil.copytree(w.registries_d, etc / "registries.d", dirs_exist_ok=True)
    script = 'mount --bind "$1" /etc/containers && shift && exec podman "$@"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(etc), *store, "pull",
         "--tls-verify=false", f"{w.host}/signed/{repo}"],
        capture_output=True, text=True, timeout=600,
    )


def test_podman_pull_accepts_the_signed_image(world: World, podman_store: list[str], tmp_path: Path) -> None:
    proc = podman_pull(world, podman_store, world.policy("a"), "tiny:1", tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = subprocess.run(["podman", *podman_store, "images", "--digests", "--format", "{{.Digest}}"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert world.good_digest in listed


@pytest.mark.parametrize(("repo", "why"), REFUSALS)
def test_podman_pull_refuses(world: World, podman_store: list[str], tmp_path: Path, repo: str, why: str) -> None:
    proc = podman_pull(world, podman_store, world.policy("a"), repo, tmp_path)
    assert proc.returncode != 0, f"podman pulled {repo}"
    assert "Source image rejected" in proc.stderr and why in proc.stderr, proc.stderr[-3000:]


def test_two_builders_each_required(world: World, tiny: tuple[str, ...], source_cache: Path, tmp_path: Path) -> None:
    """One requirement per builder: a only is refused; once b rebuilt the same digest and signed, accepted."""
    both = world.policy("a", "b")
    ref = f"{world.host}/signed/two:1"
    _push(str(world.good), ref, "--sign-key", str(world.key("a.key")), "--gpg-key", str(world.key("a.gpg.key")),
          "--lookaside", str(world.look))
    refused = skopeo_copy(world, both, "two:1", tmp_path / "one")
    assert refused.returncode != 0 and "Invalid GPG signature" in refused.stderr, refused.stderr
    rebuilt = _own_build(tmp_path / "b", tiny, source_cache)  # builder b's own build
    assert rebuilt.manifest.digest == world.good_digest
    hermetic("sign", ref, "--layout", str(rebuilt.layout), "--insecure", "--quiet", "--sign-key", str(world.key("b.key")),
             "--gpg-key", str(world.key("b.gpg.key")), "--lookaside", str(world.look))
    accepted = skopeo_copy(world, both, "two:1", tmp_path / "two")
    assert accepted.returncode == 0, accepted.stderr
    # the sigstore attachment holds both builders' signatures side by side
    with RegistryClient(world.host, insecure=True) as client:
        sigs = image_signatures.in_registry(client, "signed/two", world.good_digest)
    keys = [signing.load_verify_key(world.key(f"{n}.pub")) for n in ("a", "b")]
    assert {k.keyid for k in signing.check_image_signatures(sigs, world.good_digest, keys, "two:1")} == {k.keyid for k in keys}


def test_sign_refuses_an_image_the_builder_did_not_build(world: World, tmp_path: Path) -> None:
    other = _changed(world.record, tmp_path)
    proc = hermetic("sign", f"{world.host}/signed/tiny:1", "--layout", str(other.layout), "--insecure",
                    "--sign-key", str(world.key("b.key")), check=False)
    assert proc.returncode == 8 and "is not the image you built" in proc.stderr, proc.stderr


def test_sigstore_attachment_in_registry_verifies_with_the_key(world: World) -> None:
    """The `sha256-<hex>.sig` manifest upstream containers/image reads: a's key verifies it, b's does not."""
    with RegistryClient(world.host, insecure=True) as client:
        sigs = image_signatures.in_registry(client, "signed/tiny", world.good_digest)
    assert len(sigs) == 1 and sigs[0].claims == (f"{world.host}/signed/tiny:1", world.good_digest)
    a, b = (signing.load_verify_key(world.key(f"{n}.pub")) for n in ("a", "b"))
    assert signing.check_image_signatures(sigs, world.good_digest, [a], "tiny:1") == [a]
    with pytest.raises(signing.UntrustedKeyError):
        signing.check_image_signatures(sigs, world.good_digest, [b], "tiny:1")


def test_debian_skopeo_does_not_verify_sigstore(world: World, tmp_path: Path) -> None:
    """Debian 12's containers/image refuses every image under sigstoreSigned (its sigstore code is patched out),
    which is why the OpenPGP signatures exist. If this starts passing, enforce sigstoreSigned in these tests too."""
    policy = tmp_path / "policy.json"
    req = [{"type": "sigstoreSigned", "keyPath": str(world.key("a.pub"))}]
    policy.write_text(json.dumps({"default": [{"type": "reject"}], "transports": {"docker": {world.host: req}}}))
    proc = skopeo_copy(world, policy, "tiny:1", tmp_path / "out")
    assert proc.returncode != 0 and "sigstore disabled" in proc.stderr, proc.stderr


def test_pull_brings_the_signatures_and_verify_key_checks_them(world: World, tmp_path: Path) -> None:
    """`hermetic pull --with-attestations` keeps the registry's sigstore signature beside the image; `verify --key`
    accepts its image signature and refuses, in its own class, what is unsigned (this image has no SBOM)."""
    got = tmp_path / "got"
    hermetic("pull", f"{world.host}/signed/tiny:1", "--layout", str(got), "--insecure", "--with-attestations")
    proc = hermetic("verify", "--key", str(world.key("a.pub")), str(got), check=False)
    assert proc.returncode == 10 and "the SBOM of" in proc.stderr and "not signed" in proc.stderr, proc.stderr
    other = hermetic("verify", "--key", str(world.key("b.pub")), str(got), check=False)
    assert other.returncode == 12, other.stderr
    unsigned = tmp_path / "unsigned"
    hermetic("pull", f"{world.host}/signed/unsigned:1", "--layout", str(unsigned), "--insecure", "--with-attestations")
    proc = hermetic("verify", "--key", str(world.key("a.pub")), str(unsigned), check=False)
    assert proc.returncode == 10 and "is not signed" in proc.stderr, proc.stderr


def test_a_builder_without_the_registry_signs_its_layout(
    world: World, tiny: tuple[str, ...], source_cache: Path, tmp_path: Path
) -> None:
    """The GPU runner's way: b signs its own build's layout as the published reference; a carries the layout
    back and pushes it (the same image: only b's signature is new), and adds b's OpenPGP file to the lookaside."""
    ref = f"{world.host}/signed/offline:1"
    _push(str(world.good), ref, "--sign-key", str(world.key("a.key")), "--gpg-key", str(world.key("a.gpg.key")),
          "--lookaside", str(world.look))
    rebuilt = _own_build(tmp_path / "b", tiny, source_cache)
    assert rebuilt.manifest.digest == world.good_digest
    b_look = tmp_path / "b-lookaside"
    hermetic("sign", str(rebuilt.layout), "--identity", ref, "--quiet", "--sign-key", str(world.key("b.key")),
             "--gpg-key", str(world.key("b.gpg.key")), "--lookaside", str(b_look))
    _push(str(rebuilt.layout), ref)  # no key here: the layout's signature naming this reference goes along
    src = lookaside_dir(b_look, "signed/offline", world.good_digest) / "signature-1"
    shutil.copyfile(src, lookaside_dir(world.look, "signed/offline", world.good_digest) / "signature-2")
    accepted = skopeo_copy(world, world.policy("a", "b"), "offline:1", tmp_path / "out")
    assert accepted.returncode == 0, accepted.stderr
    with RegistryClient(world.host, insecure=True) as client:
        sigs = image_signatures.in_registry(client, "signed/offline", world.good_digest)
    keys = [signing.load_verify_key(world.key(f"{n}.pub")) for n in ("a", "b")]
    assert len(signing.check_image_signatures(sigs, world.good_digest, keys, "offline:1")) == 2


def test_inspect_of_a_reference_says_whether_it_is_signed(world: World) -> None:
    signed = hermetic("inspect", f"{world.host}/signed/tiny:1", "--insecure").stdout
    assert "signatures: signed (1 image signature(s) under sha256-" in signed, signed
    unsigned = hermetic("inspect", f"{world.host}/signed/unsigned:1", "--insecure").stdout
    assert "signatures: UNSIGNED" in unsigned, unsigned
