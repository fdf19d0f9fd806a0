"""`hermetic attest`: the SBOM and provenance of an image layout or a wheel."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.attest import provenance
from hermetic.attest.attach import WHEEL_RECORD, attest_image, attest_wheel, image_facts, is_layout, record_for_image
from hermetic.attest.image_signatures import sign_layout
from hermetic.cli.common import add_command, add_sign_key, out, say, signing_key
from hermetic.core.errors import UsageError
from hermetic.oci.layout import Layout

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.model.settings import Settings


def cmd_attest(args: argparse.Namespace, settings: Settings) -> int:
    path = Path(args.artifact)
    builder_id = args.builder_id or provenance.DEFAULT_BUILDER_ID
    started = time.monotonic()
    if is_layout(path):
        facts, _ = image_facts(Layout(path), args.arch)
        rec = Path(args.record) if args.record else record_for_image(facts, settings.work_dir)
        refs = attest_image(settings, path, rec, builder_id=builder_id, arch=args.arch)
        for r in refs:
            out(f"{r.kind} {r.digest} -> {facts.name}@{facts.manifest_digest}")
        key = signing_key(settings)
        if key is not None and args.identity:
            for d in sign_layout(Layout(path), key, args.identity):
                out(f"signature {d.digest} as {args.identity}")
    elif path.suffix == ".whl" or path.name == WHEEL_RECORD or (path / WHEEL_RECORD).is_file():
        for p in attest_wheel(settings, path, builder_id):
            out(str(p))
    else:
        raise UsageError(
            f"cannot attest {path}",
            "hermetic attests OCI image layouts (written by `hermetic image`) and wheels (with their wheel-record.json)",
            "pass a layout directory, a .whl or a wheel-record.json",
        )
    signed = "signed with " + str(settings.sign_key) if settings.sign_key else "UNSIGNED (no --sign-key)"
    say(settings, f"attest: done in {time.monotonic() - started:.1f}s; {signed}")
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    p = add_command(
        subparsers, "attest", "write the SBOM (CycloneDX 1.6) and SLSA provenance of an image or a wheel", [common.base]
    )
    p.add_argument("artifact", metavar="ARTIFACT", help="an OCI image layout, a .whl or its wheel-record.json")
    p.add_argument("--record", help="build record of the image (default: WORK_DIR/llvm/<variant>/record.json)")
    p.add_argument("--arch", help="the platform of a multi-platform layout (default: this machine's)")
    p.add_argument("--builder-id", help=f"builder identity in the provenance (default {provenance.DEFAULT_BUILDER_ID})")
    p.add_argument("--identity", metavar="REGISTRY/REPO:TAG",
                   help="with --sign-key, also sign the image as the reference it will be pulled by")
    add_sign_key(p, images=False)
    p.set_defaults(func=cmd_attest)
