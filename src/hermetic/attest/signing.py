"""Signing keys, sigstore image signatures that containers tools enforce, and DSSE envelopes.

One ECDSA P-256 key signs everything a builder vouches for:

- images, in the sigstore attachment format that containers/image (skopeo,
  buildah, podman) reads with `use-sigstore-attachments`: an OCI manifest
  tagged `sha256-<hex>.sig` beside the image, one layer per signature, the
  layer a simple-signing payload naming the image's digest and reference,
  the signature in the layer's `dev.cosignproject.cosign/signature`
  annotation (cosign's format, key-based, no transparency log);
- the SBOM and the provenance, as DSSE envelopes of in-toto Statements;
- in-toto links and layouts (intoto.py).

P-256 because it is the curve every one of those verifiers accepts (cosign's
default; in-toto's `ecdsa-sha2-nistp256`). The primitives are the
`cryptography` package's; key ids and envelopes are securesystemslib's, so
in-toto's own verifier computes the same ids.
"""

from __future__ import annotations

import base64
import copy
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from hermetic import __version__
from hermetic.core.errors import SignatureError, UnsignedError, UntrustedKeyError, UsageError

KEY_PASSWORD_ENV = "HERMETIC_SIGNING_KEY_PASSWORD"
SCHEME = "ecdsa-sha2-nistp256"
MT_SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
ANN_SIGNATURE = "dev.cosignproject.cosign/signature"
SIGSTORE_TYPE = "cosign container image signature"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"


def _public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class VerifyKey:
    """A public key a verifier trusts, with the key id in-toto and DSSE envelopes name it by."""

    key: ec.EllipticCurvePublicKey
    source: str

    @property
    def sslib(self) -> SSlibKey:
        return SSlibKey.from_crypto(self.key, scheme=SCHEME)

    @property
    def keyid(self) -> str:
        return self.sslib.keyid

    @property
    def pem(self) -> bytes:
        return _public_pem(self.key)

    def verifies(self, signature: bytes, data: bytes) -> bool:
        try:
            self.key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class SigningKey:
    """A builder's private key and where it came from (a file, or the environment)."""

    key: ec.EllipticCurvePrivateKey
    source: str

    @property
    def public(self) -> VerifyKey:
        return VerifyKey(self.key.public_key(), self.source)

    @property
    def keyid(self) -> str:
        return self.public.keyid

    @property
    def signer(self) -> CryptoSigner:
        return CryptoSigner(self.key, self.public.sslib)

    def sign(self, data: bytes) -> bytes:
        """An ASN.1 DER ECDSA signature over sha256(data), the form cosign and containers/image verify."""
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))


def _p256(key: object, source: str, what: str) -> None:
    curve = getattr(key, "curve", None)
    if not isinstance(curve, ec.SECP256R1):
        raise UsageError(
            f"{source} is not an ECDSA P-256 {what}",
            f"it holds a {type(key).__name__}{' on ' + curve.name if curve else ''}; skopeo, buildah and in-toto "
            "all verify P-256 signatures, so hermetic signs with P-256 only",
            "make a key with `hermetic key generate PREFIX`",
        )


def private_key_from_pem(data: bytes, source: str, password: str | None = None) -> SigningKey:
    try:
        key = serialization.load_pem_private_key(data, password.encode() if password else None)
    except TypeError as exc:
        raise UsageError(f"{source} is encrypted", str(exc), f"set {KEY_PASSWORD_ENV} to its password") from exc
    except ValueError as exc:
        raise UsageError(f"{source} is not a PEM private key", str(exc), "pass the .key file `hermetic key generate` wrote") from exc
    _p256(key, source, "private key")
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return SigningKey(key, source)


def load_signing_key(path: Path | str | None, password: str | None = None) -> SigningKey | None:
    """The builder's key from its PEM file (--sign-key or HERMETIC_SIGNING_KEY_FILE); None when none is given."""
    if not path:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the signing key {path}", str(exc), "check the path") from exc
    return private_key_from_pem(data, str(path), password)


def load_verify_key(path: str | Path) -> VerifyKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the public key {path}", str(exc), "check the path") from exc
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise UsageError(f"{path} is not a PEM public key", str(exc), "pass the .pub file `hermetic key generate` wrote") from exc
    _p256(key, str(path), "public key")
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return VerifyKey(key, str(path))


def generate(prefix: Path) -> tuple[Path, Path]:
    """A new key pair: PREFIX.key (PKCS#8 PEM, mode 0600, never overwritten) and PREFIX.pub."""
    priv, pub = prefix.with_name(prefix.name + ".key"), prefix.with_name(prefix.name + ".pub")
    for p in (priv, pub):
        if p.exists():
            raise UsageError(f"{p} exists", "hermetic never overwrites a key", "choose another PREFIX or remove it yourself")
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub.write_bytes(_public_pem(key.public_key()))
    return priv, pub


# -- sigstore signatures of images ----------------------------------------------------------------------------


def sigstore_payload(identity: str, digest: str) -> bytes:
    """The simple-signing payload containers/image checks: exactly these critical fields, the image's digest."""
    doc = {
        "critical": {
            "identity": {"docker-reference": identity},
            "image": {"docker-manifest-digest": digest},
            "type": SIGSTORE_TYPE,
        },
        "optional": {"creator": f"hermetic {__version__}"},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class ImageSignature:
    """One layer of a `.sig` manifest: the payload and its base64 signature."""

    payload: bytes
    signature_b64: str

    @property
    def claims(self) -> tuple[str, str]:
        """(docker-reference, manifest digest) the payload claims; ('', '') when it is not a simple-signing payload."""
        try:
            crit = json.loads(self.payload)["critical"]
            return str(crit["identity"]["docker-reference"]), str(crit["image"]["docker-manifest-digest"])
        except (ValueError, KeyError, TypeError):
            return "", ""

    def verified_by(self, keys: Sequence[VerifyKey]) -> VerifyKey | None:
        try:
            raw = base64.b64decode(self.signature_b64, validate=True)
        except ValueError:
            return None
        return next((k for k in keys if k.verifies(raw, self.payload)), None)


def sign_image(key: SigningKey, identity: str, digest: str) -> ImageSignature:
    payload = sigstore_payload(identity, digest)
    return ImageSignature(payload, base64.b64encode(key.sign(payload)).decode())


def check_image_signatures(
    signatures: Sequence[ImageSignature], digest: str, keys: Sequence[VerifyKey], what: str, threshold: int = 0
) -> list[VerifyKey]:
    """The trusted keys whose signatures of `digest` verify; raises unless each key (or `threshold` of them) signed.

    Refusals by class: no signature at all or none by a required key (unsigned), a signature by a trusted key of
    another digest (the image changed after signing), signatures of this digest no trusted key verifies (another
    key made them, or they were altered).
    """
    need = threshold or len(keys)
    if not signatures:
        raise UnsignedError(f"{what} is not signed", f"there is no signature of {digest}",
                            "sign it (`hermetic sign`, `hermetic push --sign-key`) or get the publisher's signature")
    about = [s for s in signatures if s.claims[1] == digest]
    good = {k.keyid: k for s in about for k in [s.verified_by(keys)] if k is not None}
    if len(good) >= need:
        return list(good.values())
    moved = sorted({s.claims[1] for s in signatures if s.claims[1] != digest and s.verified_by(keys)})
    if moved:
        raise SignatureError(f"{what} is not the image that was signed",
                             f"the trusted signatures are of {', '.join(moved)}; the image is {digest}",
                             "the image was changed after signing; do not use it")
    if len(about) > len(good):
        raise UntrustedKeyError(
            f"{what} is signed, but not by {'a trusted key' if not good else 'every required key'}",
            f"{len(about) - len(good)} signature(s) of {digest} verify with none of {', '.join(k.source for k in keys)}",
            "verify with the publishers' public keys; if they are the right ones, a signature was forged or altered",
        )
    missing = [k.source for k in keys if k.keyid not in good]
    raise UnsignedError(f"{what} is not signed by {', '.join(missing)}",
                        f"{len(good)} of the {need} required signatures of {digest} are there",
                        "every builder must rebuild the image to this digest and sign it (`hermetic sign`)")


def sig_tag(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    return f"{algo}-{hexpart}.sig"


def signatures_of_manifest(manifest: Mapping[str, Any], read_blob: Any) -> list[ImageSignature]:
    """The signatures in a `.sig` manifest; read_blob(descriptor dict) -> bytes, verified by the caller."""
    out = []
    for layer in manifest.get("layers") or []:
        if not isinstance(layer, dict) or layer.get("mediaType") != MT_SIMPLESIGNING:
            continue
        sig = str((layer.get("annotations") or {}).get(ANN_SIGNATURE, ""))
        if sig:
            out.append(ImageSignature(read_blob(layer), sig))
    return out


# -- DSSE envelopes --------------------------------------------------------------------------------------------


def dsse_sign(key: SigningKey, payload: bytes, payload_type: str = IN_TOTO_PAYLOAD) -> dict[str, Any]:
    env = Envelope(payload, payload_type, {})
    env.sign(key.signer)
    data: dict[str, Any] = env.to_dict()
    return data


def dsse_open(envelope: Any, keys: Sequence[VerifyKey], what: str, threshold: int = 0) -> bytes:
    """The payload of a DSSE envelope once `threshold` (default: all) of the keys verify it; refusals classed."""
    try:
        env = Envelope.from_dict(copy.deepcopy(envelope))  # from_dict rewrites the dict it is given
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SignatureError(f"{what} is not a DSSE envelope", str(exc), "attest the artifact again") from exc
    if not env.signatures:
        raise UnsignedError(f"{what} carries no signature", "its DSSE envelope has an empty signature list", "")
    need = threshold or len(keys)
    trusted = {k.keyid for k in keys}
    try:
        env.verify([k.sslib for k in keys], need)
    except VerificationError as exc:
        if not trusted & set(env.signatures):
            raise UntrustedKeyError(
                f"{what} is signed, but not by a trusted key",
                f"signed by key id(s) {', '.join(sorted(env.signatures))}; trusted: {', '.join(sorted(trusted))}",
                "verify with the publisher's public key",
            ) from exc
        raise SignatureError(f"the signature of {what} does not verify", str(exc),
                             "the document was changed after it was signed; do not trust it") from exc
    return bytes(env.payload)


def dsse_bytes(envelope: Mapping[str, Any]) -> bytes:
    return json.dumps(envelope, indent=2, sort_keys=True).encode() + b"\n"


def raw_signature(key: SigningKey, data: bytes) -> Signature:
    """A securesystemslib Signature over data (in-toto's Metablock signatures)."""
    sig: Signature = key.signer.sign(data)
    return sig
