"""`hermetic key generate` and `hermetic sign`: a builder's key pair, image signatures consumers' tools enforce.

The signing key's path is a setting (--sign-key, HERMETIC_SIGNING_KEY_FILE); the OpenPGP key's is read here
(--gpg-key, HERMETIC_GPG_KEY_FILE). Below the CLI only key objects travel.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.attest import image_signatures, signing, simple_signing
from hermetic.cli.common import add_command, add_group, add_sign_key, gpg_sign, identity_of, out, say, signing_key
from hermetic.core.errors import UsageError, VerifyError
from hermetic.oci.layout import Layout, fill_blobs, pick_root
from hermetic.oci.registry import Progress, make_client
from hermetic.oci.targets import parse_image_source
from hermetic.oci.types import LayoutRef, Reference, sha256_digest

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.model.settings import Settings


def cmd_key_generate(args: argparse.Namespace, settings: Settings) -> int:
    priv, pub = signing.generate(Path(args.prefix))
    out(f"{priv} (private; keep it secret)")
    out(f"{pub} (public: hermetic verify --key, in-toto-verify, policy.json sigstoreSigned)")
    say(settings, f"key id {signing.load_verify_key(pub).keyid}")
    if not args.no_gpg:
        gpriv, gpub = simple_signing.generate(Path(args.prefix), args.name or Path(args.prefix).name)
        out(f"{gpriv} (OpenPGP, private; keep it secret)")
        out(f"{gpub} (OpenPGP, public: policy.json signedBy GPGKeys, what Debian's skopeo and buildah enforce)")
    return 0


def cmd_sign(args: argparse.Namespace, settings: Settings) -> int:
    key = signing_key(settings, required=True)
    assert key is not None
    src = Path(args.target)
    if (src / "oci-layout").is_file() or isinstance(parse_image_source(args.target), LayoutRef):
        if not args.identity:
            raise UsageError("signing a layout needs --identity REGISTRY/REPO:TAG",
                             "a signature names the reference consumers pull the image by", "")
        layout = Layout(Path(args.target.removeprefix("oci:")))
        if args.layout:
            _fill_from_own_build(layout, Layout(Path(args.layout)))
        layout.verify()
        subjects = image_signatures.sign_layout(layout, key, args.identity)
        for subject in subjects:
            out(f"signed {subject.digest} as {args.identity} by {key.keyid[:16]}")
        # an OpenPGP signature too, for a machine that cannot reach the registry: its lookaside files travel
        ref = parse_image_source(args.identity)
        if isinstance(ref, Reference):
            for path in gpg_sign(args, ref, [s.digest for s in subjects]):
                out(f"{path} (OpenPGP)")
        return 0
    return _sign_remote(args, settings, key)


def _fill_from_own_build(theirs: Layout, mine: Layout) -> None:
    """Another builder's layout (it comes back without the layers): signed only when it is the image this builder
    built, its missing blobs taken from that build."""
    want, have = pick_root(theirs), pick_root(mine)
    if want.digest != have.digest:
        raise VerifyError(
            f"{theirs.path} is not the image you built", f"it holds {want.digest}; your build is {have.digest}",
            "do not sign it: find out why the builds differ (`hermetic verify`)",
        )
    copied = fill_blobs(theirs, mine, have)
    out(f"{copied} blob(s) of {have.digest} copied in from {mine.path}")


def _sign_remote(args: argparse.Namespace, settings: Settings, key: signing.SigningKey) -> int:
    """A second builder's signature: only of the digest its own rebuild produced."""
    ref = parse_image_source(args.target)
    assert isinstance(ref, Reference)
    if not args.layout:
        raise UsageError(
            f"signing {ref} needs --layout DIR: the image you rebuilt",
            "a builder signs a published image only when its own build gave the same digest",
            "rebuild (`hermetic all`), then `hermetic sign REF --layout build/images/<name>`",
        )
    mine = pick_root(Layout(Path(args.layout)))
    client = make_client(ref, insecure=args.insecure, environ=os.environ, progress=Progress(enabled=not settings.quiet))
    try:
        _, body = client.get_manifest(ref.repository, ref.reference)
        theirs = sha256_digest(body)
        if theirs != mine.digest:
            raise VerifyError(
                f"{ref} is not the image you built", f"the registry has {theirs}; your build is {mine.digest}",
                "do not sign it: find out why the builds differ (`hermetic verify`)",
            )
        layout = Layout(Path(args.layout))
        image_signatures.sign_layout(layout, key, identity_of(ref))
        subjects = image_signatures.image_subjects(layout)
        for subject in subjects:
            sigs = [s for s in image_signatures.in_layout(layout, subject.digest) if s.verified_by([key.public])]
            got = image_signatures.push(client, ref.repository, subject.digest, sigs)
            out(f"{ref.registry}/{ref.repository}:{got.tag} {got.count} signature(s) of {subject.digest}")
        for path in gpg_sign(args, ref, [s.digest for s in subjects]):
            out(f"{path} (OpenPGP)")
    finally:
        client.close()
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    key = add_group(subparsers, "key", "make a signing key pair", "key_action")
    gen = add_command(key, "generate", "write PREFIX.key (private, mode 0600) and PREFIX.pub (ECDSA P-256, PEM)",
                      [common.base])
    gen.add_argument("prefix", metavar="PREFIX")
    gen.add_argument("--name", help="the OpenPGP key's user name (default: PREFIX's file name)")
    gen.add_argument("--no-gpg", action="store_true", help="no OpenPGP key pair (PREFIX.gpg.key, PREFIX.gpg.pub)")
    gen.set_defaults(func=cmd_key_generate)

    sign = add_command(
        subparsers, "sign",
        "sign an image layout, or a pushed image you rebuilt to the same digest (sigstore signatures in the "
        "format skopeo, buildah and podman enforce)",
        [common.base],
    )
    sign.add_argument("target", metavar="LAYOUT|REF", help="an OCI image layout, or REGISTRY/REPO:TAG")
    sign.add_argument("--identity", metavar="REGISTRY/REPO:TAG", help="for a layout: the reference it will be pulled by")
    sign.add_argument("--layout", metavar="DIR",
                      help="your own build of it, whose digest must be the same: for a REF, the registry's image; for a "
                           "LAYOUT (another builder's, which comes without its layers), the blobs it lacks come from it")
    sign.add_argument("--insecure", action="store_true", help="plain http (a registry on localhost)")
    add_sign_key(sign)
    sign.set_defaults(func=cmd_sign)
