"""`hermetic verify --key`: an artifact's signatures, with nothing trusted but the public keys given.

For an image layout: the image's sigstore signature (kept beside it) by every
key given (or --threshold of them), and the DSSE envelopes of its SBOM and
provenance by one of them (each builder attests its own build); each envelope
must be about this image, and the unsigned SBOM and provenance beside it must
be the very documents signed. For a wheel: its two envelopes, about its sha256, and the
same agreement with the unsigned sidecars. Each refusal raises an error of its
own class (unsigned, bad signature, untrusted key, mismatch: errors.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest import attach as attest
from hermetic.attest import image_signatures, provenance, sbom
from hermetic.attest.signing import check_image_signatures, dsse_open
from hermetic.core.digests import file_sha256
from hermetic.core.errors import SignatureError, UnsignedError, VerifyError
from hermetic.oci import referrers
from hermetic.oci.bundle import open_layout
from hermetic.oci.layout import Layout, pick_root

if TYPE_CHECKING:
    from hermetic.attest.signing import VerifyKey


@dataclass(frozen=True)
class Checked:
    what: str
    detail: str


def _statement(envelope: bytes, keys: Sequence[VerifyKey], what: str, threshold: int) -> tuple[bytes, dict[str, Any]]:
    try:
        env = json.loads(envelope)
    except ValueError as exc:
        raise SignatureError(f"{what} is not JSON", str(exc), "attest the artifact again") from exc
    payload = dsse_open(env, keys, what, threshold)
    try:
        statement = json.loads(payload)
    except ValueError as exc:
        raise SignatureError(f"the signed payload of {what} is not JSON", str(exc), "") from exc
    if not isinstance(statement, dict):
        raise SignatureError(f"the signed payload of {what} is not an in-toto Statement", "", "")
    return payload, statement


def _about(statement: dict[str, Any], sha256: str, what: str, artifact: str) -> None:
    if sha256 not in provenance.subject_sha256s(statement):
        raise SignatureError(
            f"{what} is signed for another artifact",
            f"its subject is {provenance.subject_sha256s(statement)}; {artifact} is sha256:{sha256}",
            "the signed document was moved from another artifact; do not trust it",
        )


def _same(plain: bytes | None, signed: bytes, what: str) -> None:
    if plain is not None and plain != signed:
        raise VerifyError(f"the {what} beside the artifact is not the one that was signed",
                          "its bytes differ from the signed envelope's", "it was replaced: trust the signed one only")


def _documents(
    pairs: Sequence[tuple[str, bytes | None, bytes | None]], keys: Sequence[VerifyKey], sha256: str, artifact: str,
) -> list[Checked]:
    """(name, envelope, unsigned document) for the SBOM and the provenance."""
    out = []
    for name, env, plain in pairs:
        if env is None:
            raise UnsignedError(f"the {name} of {artifact} is not signed", "there is no DSSE envelope of it",
                                "attest it with a key (`hermetic attest --sign-key KEY`)")
        # each builder attests its own build (its own times and machine): one trusted signature suffices
        payload, statement = _statement(env, keys, f"the {name} of {artifact}", 1)
        _about(statement, sha256, f"the {name}", artifact)
        signed = sbom.dumps(statement.get("predicate") or {}) if name == "SBOM" else payload
        _same(plain, signed, name)
        out.append(Checked(name, f"DSSE signed, about sha256:{sha256[:16]}…, same as the unsigned {name}"))
    return out


def check_bundle(path: Path, keys: Sequence[VerifyKey], threshold: int = 0) -> list[Checked]:
    """A bundle: its manifest's signature (every blob was checked against the manifest by open_layout)."""
    opened = open_layout(path)
    digest = opened.manifest.digest
    good = check_image_signatures(image_signatures.in_layout(opened.layout, digest), digest, keys, opened.name, threshold)
    return [Checked("bundle", f"{digest} signed by {', '.join(k.source for k in good)}; all "
                              f"{len(opened.entries)} inputs match it")]


def check_layout(path: Path, keys: Sequence[VerifyKey], threshold: int = 0, arch: str | None = None) -> list[Checked]:
    layout = Layout(path)
    layout.verify()
    facts, _ = attest.image_facts(layout, arch)
    root = pick_root(layout)
    good = check_image_signatures(image_signatures.in_layout(layout, root.digest), root.digest, keys, facts.name, threshold)
    out = [Checked("image", f"{root.digest} signed by {', '.join(k.source for k in good)}")]
    refs = referrers.referrers(layout, subject=facts.manifest_digest)

    def payload(kind: str) -> bytes | None:
        found = [r for r in refs if r.kind == kind]
        return found[-1].read() if found else None

    digest = facts.manifest_digest.removeprefix("sha256:")
    out += _documents(
        [("SBOM", payload(attest.KIND_SBOM_DSSE), payload(attest.KIND_SBOM)),
         ("provenance", payload(attest.KIND_PROVENANCE_DSSE), payload(attest.KIND_PROVENANCE))],
        keys, digest, facts.name,
    )
    return out


def check_wheel(path: Path, keys: Sequence[VerifyKey]) -> list[Checked]:
    art = attest.find_wheel(path)
    sha = file_sha256(art.wheel)
    if sha != art.record.sha256:
        raise VerifyError(f"{art.wheel.name} does not match its record", f"sha256 {sha}, recorded {art.record.sha256}",
                          "the wheel was changed after it was built")

    def read(p: Path) -> bytes | None:
        return p.read_bytes() if p.is_file() else None

    (sbom_plain, prov_plain), (sbom_env, prov_env) = attest.sidecars(art.wheel), attest.signed_sidecars(art.wheel)
    return _documents(
        [("SBOM", read(sbom_env), read(sbom_plain)), ("provenance", read(prov_env), read(prov_plain))],
        keys, sha, art.wheel.name,
    )
