"""Signing formats and refusals: keys, sigstore image signatures, DSSE envelopes, `verify --key` on a layout."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from hermetic.attest import attach as attest
from hermetic.attest import image_signatures, provenance, sbom, signature_check, signing
from hermetic.core.errors import ExitCode, SignatureError, UnsignedError, UntrustedKeyError, UsageError, VerifyError
from hermetic.oci import referrers
from hermetic.oci.image import ImageResult, ImageSpec, write_image
from hermetic.oci.layout import Layout
from hermetic.oci.types import Descriptor

pytestmark = pytest.mark.unit

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[signing.SigningKey, signing.VerifyKey]]:
    base = tmp_path_factory.mktemp("keys")
    out = {}
    for name in ("a", "b"):
        priv, pub = signing.generate(base / name)
        key = signing.load_signing_key(priv)
        assert key is not None
        out[name] = (key, signing.load_verify_key(pub))
    return out


def test_generate_writes_a_private_key_only_its_owner_reads_and_never_overwrites(tmp_path: Path) -> None:
    priv, pub = signing.generate(tmp_path / "k")
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert pub.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    with pytest.raises(UsageError, match="exists"):
        signing.generate(tmp_path / "k")


def test_keys_other_than_p256_are_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP384R1())
    path = tmp_path / "p384.key"
    path.write_bytes(other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
    with pytest.raises(UsageError, match="P-256"):
        signing.load_signing_key(path)
    (tmp_path / "junk.pub").write_text("not a key")
    with pytest.raises(UsageError, match="not a PEM public key"):
        signing.load_verify_key(tmp_path / "junk.pub")


def test_sigstore_payload_has_exactly_the_fields_containers_image_requires() -> None:
    doc = json.loads(signing.sigstore_payload("reg.example/llvm:1", DIGEST))
    assert set(doc) == {"critical", "optional"}
    assert doc["critical"] == {
        "identity": {"docker-reference": "reg.example/llvm:1"},
        "image": {"docker-manifest-digest": DIGEST},
        "type": "cosign container image signature",
    }


def test_image_signature_is_der_ecdsa_over_the_payload(keys: dict) -> None:
    key, pub = keys["a"]
    sig = signing.sign_image(key, "reg.example/llvm:1", DIGEST)
    raw = base64.b64decode(sig.signature_b64)
    assert raw[0] == 0x30  # an ASN.1 SEQUENCE, as cosign and containers/image expect
    assert pub.verifies(raw, sig.payload) and not pub.verifies(raw, sig.payload + b" ")


def test_image_signature_refusals_have_their_own_classes(keys: dict) -> None:
    (a, apub), (b, bpub) = keys["a"], keys["b"]
    good = signing.sign_image(a, "r/x:1", DIGEST)
    assert signing.check_image_signatures([good], DIGEST, [apub], "x") == [apub]
    cases = [
        ([], [apub], UnsignedError, ExitCode.UNSIGNED),
        ([good], [bpub], UntrustedKeyError, ExitCode.UNTRUSTED_KEY),  # signed by another key
        ([good], [apub, bpub], UnsignedError, ExitCode.UNSIGNED),  # 1 of 2 builders
        ([signing.sign_image(a, "r/x:1", OTHER)], [apub], SignatureError, ExitCode.BAD_SIGNATURE),  # image changed
        # the payload altered to name this digest: the signature no longer verifies
        ([signing.ImageSignature(signing.sigstore_payload("r/x:1", DIGEST).replace(b"r/x", b"r/y"), good.signature_b64)],
         [apub], UntrustedKeyError, ExitCode.UNTRUSTED_KEY),
    ]
    for sigs, trusted, cls, code in cases:
        with pytest.raises(cls) as err:
            signing.check_image_signatures(sigs, DIGEST, trusted, "x")
        assert err.value.exit_code == code
    both = [good, signing.sign_image(b, "r/x:1", DIGEST)]
    assert len(signing.check_image_signatures(both, DIGEST, [apub, bpub], "x")) == 2
    assert len(signing.check_image_signatures([good], DIGEST, [apub, bpub], "x", threshold=1)) == 1


def test_dsse_envelope_opens_only_with_the_right_key_and_payload(keys: dict) -> None:
    (a, apub), (_, bpub) = keys["a"], keys["b"]
    env = signing.dsse_sign(a, b'{"x": 1}')
    assert env["payloadType"] == "application/vnd.in-toto+json" and env["signatures"][0]["keyid"] == apub.keyid
    assert signing.dsse_open(env, [apub], "doc") == b'{"x": 1}'
    with pytest.raises(UntrustedKeyError):
        signing.dsse_open(env, [bpub], "doc")
    altered = dict(env, payload=base64.b64encode(b'{"x": 2}').decode())
    with pytest.raises(SignatureError, match="does not verify"):
        signing.dsse_open(altered, [apub], "doc")
    with pytest.raises(UnsignedError):
        signing.dsse_open(dict(env, signatures=[]), [apub], "doc")


def test_keyid_is_the_one_in_toto_verify_computes(keys: dict) -> None:
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey

    _, pub = keys["a"]
    # in-toto-verify loads --verification-keys so (in_toto/models/_signer.py: load_public_key_from_file)
    assert SSlibKey.from_crypto(load_pem_public_key(pub.pem)).keyid == pub.keyid


# -- a signed layout: `hermetic verify --key` -----------------------------------------------------------------


def _image(tmp_path: Path) -> ImageResult:
    root = tmp_path / "root" / "usr" / "lib64" / "llvm-tiny-1.0.0"
    root.mkdir(parents=True)
    (root / "tiny.h").write_text("int tiny(void);\n")
    spec = ImageSpec(variant="tiny", version="1.0.0", prefix="/usr/lib64/llvm-tiny-1.0.0", install_root=tmp_path / "root",
                     epoch=1700000000, arch="amd64", os="linux", recipe={"name": "tiny"}, sources=(),
                     tree_digest="sha256:" + "0" * 64)
    return write_image(spec, tmp_path / "img")


def _attach(layout: Layout, subject: Descriptor, key: signing.SigningKey | None, name: str) -> None:
    bom = {"bomFormat": "CycloneDX", "components": []}
    statement = {"_type": provenance.STATEMENT_TYPE, "subject": [{"name": name, "digest": {"sha256": subject.digest[7:]}}],
                 "predicateType": provenance.PREDICATE_TYPE, "predicate": {}}
    referrers.attach(layout, subject, sbom.MEDIA_TYPE, sbom.dumps(bom), "sbom", {referrers.ANN_KIND: attest.KIND_SBOM})
    referrers.attach(layout, subject, provenance.MEDIA_TYPE, provenance.dumps(statement), "prov",
                     {referrers.ANN_KIND: attest.KIND_PROVENANCE})
    if key is None:
        return
    for kind, doc in ((attest.KIND_SBOM_DSSE, attest.sbom_statement(bom, name, subject.digest[7:])),
                      (attest.KIND_PROVENANCE_DSSE, statement)):
        referrers.attach(layout, subject, attest.DSSE_MEDIA_TYPE, attest.envelope(key, doc), kind,
                         {referrers.ANN_KIND: kind})


def test_verify_key_accepts_a_signed_layout_and_refuses_each_change(tmp_path: Path, keys: dict) -> None:
    (a, apub), (_, bpub) = keys["a"], keys["b"]
    img = _image(tmp_path)
    layout = Layout(img.layout)
    subject = Descriptor(img.manifest.media_type, img.manifest.digest, img.manifest.size)
    with pytest.raises(UnsignedError):
        signature_check.check_layout(img.layout, [apub])
    image_signatures.sign_layout(layout, a, "reg.example/tiny:1")
    with pytest.raises(UnsignedError, match="SBOM"):  # the image is signed, its attestations are not
        _attach(layout, subject, None, img.name)
        signature_check.check_layout(img.layout, [apub])
    _attach(layout, subject, a, img.name)
    checked = signature_check.check_layout(img.layout, [apub])
    assert [c.what for c in checked] == ["image", "SBOM", "provenance"]
    with pytest.raises(UntrustedKeyError):
        signature_check.check_layout(img.layout, [bpub])
    # a replaced SBOM: a well-formed document beside the image, not the one signed
    referrers.attach(layout, subject, sbom.MEDIA_TYPE, sbom.dumps({"bomFormat": "CycloneDX", "components": [{}]}),
                     "sbom", {referrers.ANN_KIND: attest.KIND_SBOM})
    with pytest.raises(VerifyError, match="not the one that was signed") as err:
        signature_check.check_layout(img.layout, [apub])
    assert err.value.exit_code == ExitCode.VERIFY


def test_verify_key_refuses_an_envelope_moved_from_another_image(tmp_path: Path, keys: dict) -> None:
    a, apub = keys["a"]
    img = _image(tmp_path)
    layout = Layout(img.layout)
    image_signatures.sign_layout(layout, a, "reg.example/tiny:1")
    other = Descriptor(img.manifest.media_type, OTHER, 1)
    _attach(layout, Descriptor(img.manifest.media_type, img.manifest.digest, img.manifest.size), None, img.name)
    statement = {"_type": provenance.STATEMENT_TYPE, "subject": [{"name": "x", "digest": {"sha256": other.digest[7:]}}],
                 "predicateType": provenance.PREDICATE_TYPE, "predicate": {}}
    subject = Descriptor(img.manifest.media_type, img.manifest.digest, img.manifest.size)
    for kind in (attest.KIND_SBOM_DSSE, attest.KIND_PROVENANCE_DSSE):
        referrers.attach(layout, subject, attest.DSSE_MEDIA_TYPE, attest.envelope(a, statement), kind,
                         {referrers.ANN_KIND: kind})
    with pytest.raises(SignatureError, match="signed for another artifact"):
        signature_check.check_layout(img.layout, [apub])


def test_cli_attest_signs_and_verify_key_checks_with_exit_classes(tmp_path: Path, keys: dict) -> None:
    from helpers import hermetic
    from schemas.examples import fake_image, fake_llvm_build

    base = tmp_path / "k"
    base.mkdir()
    for name in ("a", "b"):
        hermetic("key", "generate", str(base / name), "--no-gpg", "--quiet")
    rec = fake_llvm_build(tmp_path / "build")
    layout = fake_image(rec, tmp_path / "image")
    unsigned = hermetic("verify", "--key", str(base / "a.pub"), str(layout), check=False)
    assert unsigned.returncode == ExitCode.UNSIGNED, unsigned.stderr
    got = hermetic("attest", str(layout), "--record", str(rec), "--sign-key", str(base / "a.key"),
                   "--identity", "reg.example/llvm:1")
    assert "sbom.dsse" in got.stdout and "provenance.dsse" in got.stdout and "signature" in got.stdout
    ok = hermetic("verify", "--key", str(base / "a.pub"), str(layout))
    assert "verify: signatures OK" in ok.stdout
    other = hermetic("verify", "--key", str(base / "b.pub"), str(layout), check=False)
    assert other.returncode == ExitCode.UNTRUSTED_KEY and "not by a trusted key" in other.stderr
    both = hermetic("verify", "--key", str(base / "a.pub"), "--key", str(base / "b.pub"), str(layout), check=False)
    assert both.returncode == ExitCode.UNSIGNED and "b.pub" in both.stderr  # the image: 1 of 2 builders
    one_of_two = hermetic("verify", "--key", str(base / "a.pub"), "--key", str(base / "b.pub"), "--threshold", "1",
                          str(layout))
    assert one_of_two.returncode == 0


def test_verify_key_on_a_wheel(tmp_path: Path, keys: dict) -> None:
    from hermetic.model.settings import Settings
    from schemas.examples import fake_wheel, settings

    (a, apub), (_, bpub) = keys["a"], keys["b"]
    wheel = fake_wheel(tmp_path / "dist")
    plain: Settings = settings(tmp_path)
    attest.attest_wheel(plain, wheel)
    with pytest.raises(UnsignedError, match="SBOM"):
        signature_check.check_wheel(wheel, [apub])
    import dataclasses

    attest.attest_wheel(dataclasses.replace(plain, sign_key=Path(a.source)), wheel)
    assert [c.what for c in signature_check.check_wheel(wheel, [apub])] == ["SBOM", "provenance"]
    with pytest.raises(UntrustedKeyError):
        signature_check.check_wheel(wheel, [bpub])
    sbom_path, _ = attest.sidecars(wheel)
    sbom_path.write_text(sbom_path.read_text().replace('"version": 1', '"version": 2'))
    with pytest.raises(VerifyError, match="not the one that was signed"):
        signature_check.check_wheel(wheel, [apub])
    # without a key the envelopes of earlier documents go: they would no longer match
    attest.attest_wheel(plain, wheel)
    assert not any(p.exists() for p in attest.signed_sidecars(wheel))
