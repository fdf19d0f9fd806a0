"""`hermetic verify`: rebuild an artifact elsewhere and compare."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.attest.attach import WHEEL_RECORD, is_layout
from hermetic.attest.signature_check import check_layout, check_wheel
from hermetic.attest.signing import load_verify_key
from hermetic.cli.common import add_command, out, out_json, say
from hermetic.core.errors import UsageError
from hermetic.core.log import stderr_log
from hermetic.oci.targets import parse_image_source
from hermetic.oci.types import LayoutRef
from hermetic.verify.rebuild import Mismatch, verify

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.model.settings import Settings


def _artifact(text: str) -> Path:
    """A path, or a local image layout named as pull and inspect name one (oci:DIR)."""
    if not text.startswith("oci:"):
        return Path(text)
    src = parse_image_source(text)
    if isinstance(src, LayoutRef) and not src.tag:
        return src.path
    raise UsageError(
        f"cannot verify {text}", "verify takes a whole local layout (oci:DIR), not one tag of it",
        "pull that image into its own layout first (`hermetic pull oci:DIR:TAG --layout NEW`), then verify NEW",
    )


def _check_signatures(args: argparse.Namespace, settings: Settings) -> None:
    """--key: the artifact's signatures by those keys (all of them, or --threshold of them); raises on any refusal."""
    keys = [load_verify_key(k) for k in args.key]
    threshold = args.threshold or len(keys)
    if not 1 <= threshold <= len(keys):
        raise UsageError(f"--threshold {args.threshold} with {len(keys)} key(s)", "", "give 1..number of --key")
    path = _artifact(args.artifact)
    if is_layout(path):
        checked = check_layout(path, keys, threshold, settings.arch)
    elif path.suffix == ".whl" or path.name == WHEEL_RECORD or (path / WHEEL_RECORD).is_file():
        checked = check_wheel(path, keys)
    else:
        raise UsageError(f"cannot check the signatures of {path}", "--key checks image layouts and wheels",
                         "pass a layout (pull it with --with-attestations) or a .whl")
    for c in checked:
        out(f"signature: {c.what:<10} {c.detail}")
    out(f"verify: signatures OK ({threshold} of {len(keys)} key(s))")


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    if args.key:
        _check_signatures(args, settings)
        if not args.rebuild:
            return 0
    if shutil.which("diffoscope") is None:
        say(settings, "verify: diffoscope is not installed; a mismatch will be reported without a content diff")
    try:
        report = verify(
            settings,
            _artifact(args.artifact),
            record_path=Path(args.record) if args.record else None,
            rebuild_dir=Path(args.rebuild_dir) if args.rebuild_dir else None,
            keep=args.keep,
            reuse_pruned=args.reuse_pruned,
            from_release=args.from_release,
            arch=settings.arch,  # the common --arch: also which platform of a multi-platform layout
            log=stderr_log(settings.quiet),
        )
    except Mismatch as exc:
        # The report goes to stdout even on a mismatch; the error (and its exit code) follows.
        if args.json:
            out_json(exc.report.as_json())
        else:
            out(exc.report.render())
        raise
    if args.json:
        out_json(report.as_json())
    else:
        out(report.render())
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    p = add_command(
        subparsers, "verify",
        "rebuild an LLVM tree, image or wheel from its record elsewhere, later, under another umask; compare",
        [common.build],
    )
    p.add_argument("artifact", metavar="ARTIFACT", help="record.json (or its directory), an OCI image layout (DIR or oci:DIR), a .whl or wheel-record.json")
    p.add_argument("--record", help="for an image: the record.json it was written from (default: found in WORK_DIR, else its provenance)")
    p.add_argument("--rebuild-dir", help="where to rebuild (default: WORK_DIR/verify/<kind>-<time>)")
    p.add_argument("--keep", action="store_true", help="keep the rebuild even when it matches")
    p.add_argument("--reuse-pruned", action="store_true", help="take the pruned source from the cache (sha256 checked) instead of pruning again")
    p.add_argument("--from-release", action="store_true",
                   help="LLVM: build from the whole release archive, not the pruned subset (which is still pruned "
                        "again and compared): a match shows pruning dropped nothing the build reads")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    g = p.add_argument_group("signatures")
    g.add_argument("--key", action="append", default=[], metavar="PUB",
                   help="check the signatures of the image (or wheel), its SBOM and provenance by this public key; "
                        "repeatable (one per builder); then stop, unless --rebuild")
    g.add_argument("--threshold", type=int, default=0, metavar="K", help="with several --key: K of them suffice (all)")
    g.add_argument("--rebuild", action="store_true", help="with --key: also rebuild and compare")
    p.set_defaults(func=cmd_verify)
