"""`hermetic intoto links|layout`: in-toto evidence that the in-toto project's own `in-toto-verify` checks."""

from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.attest import intoto
from hermetic.attest.attach import find_wheel
from hermetic.attest.signing import load_verify_key
from hermetic.cli.common import add_command, add_group, add_setting, add_sign_key, out, say, signing_key
from hermetic.core.errors import UsageError
from hermetic.model import record

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.model.settings import Settings


def cmd_links(args: argparse.Namespace, settings: Settings) -> int:
    key = signing_key(settings, required=True)
    assert key is not None
    dest = Path(args.dir)
    rec = record.load_build_record(Path(args.record))
    wheel = None
    if args.wheel:
        art = find_wheel(Path(args.wheel))
        wheel = (art.record, art.wheel)
    steps = intoto.evidence(settings.llvm_recipe_dir, settings.root, rec, Path(args.image), wheel)
    if args.links_only:
        # Another builder's products are already staged with that builder's attestations; this one vouches for
        # the reproducible steps only (the attest step takes one builder's word, about the agreed products).
        steps = {k: v for k, v in steps.items() if k != "attest"}
    else:
        intoto.stage_products(dest, Path(args.image), wheel[1] if wheel else None)
    for p in intoto.write_links(dest, key, steps):
        out(str(p))
    say(settings, f"links signed by {key.keyid[:8]} ({key.source})")
    return 0


def cmd_layout(args: argparse.Namespace, settings: Settings) -> int:
    owner = signing_key(settings, required=True)
    assert owner is not None
    builders = [load_verify_key(p) for p in args.builder] or [owner.public]
    if args.expires_days < 1:
        raise UsageError(f"--expires-days {args.expires_days}", "a layout must expire in the future", "give 1 or more")
    expires = _dt.datetime.now(_dt.UTC) + _dt.timedelta(days=args.expires_days)
    doc = intoto.layout(builders, args.threshold or len(builders), expires, args.wheel)
    out(str(intoto.write_layout(Path(args.dir), owner, doc)))
    say(settings, f"layout signed by {owner.keyid[:8]}; {args.threshold or len(builders)} of {len(builders)} builder(s) "
                  f"per step; verify in {args.dir}: in-toto-verify --layout {intoto.LAYOUT_FILE} "
                  f"--verification-keys OWNER.pub --link-dir {intoto.LINK_DIR} --inspection-timeout 600")
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    group = add_group(subparsers, "intoto", "in-toto links and layout of a build, for in-toto-verify", "intoto_action")
    links = add_command(group, "links", "write DIR/links/<step>.<keyid>.link for fetch, prune, build, image "
                        "(wheel), attest, signed with --sign-key, and the final products beside them", [common.base])
    links.add_argument("dir", metavar="DIR", help="the evidence directory (new, or holding another builder's links)")
    links.add_argument("--record", required=True, help="the record.json of the LLVM build")
    add_setting(links, "llvm_recipe", "the recipe the tree was built with")
    links.add_argument("--image", required=True, metavar="LAYOUT", help="the image layout written from it (attested)")
    links.add_argument("--wheel", help="a wheel built against that tree (.whl or its wheel-record.json)")
    links.add_argument("--links-only", action="store_true",
                       help="only the links (a second builder adds its own to the first builder's DIR)")
    add_sign_key(links, images=False)
    links.set_defaults(func=cmd_links)

    lay = add_command(group, "layout", "write DIR/root.layout: who performs each step (k of n builders), what flows "
                      "between the steps, the inspection that unpacks the image; signed with --sign-key (the owner's)",
                      [common.base])
    lay.add_argument("dir", metavar="DIR")
    lay.add_argument("--builder", action="append", default=[], metavar="PUB",
                     help="a builder's public key; repeatable (default: the owner's own)")
    lay.add_argument("--threshold", type=int, default=0, metavar="K", help="builders that must agree (all of them)")
    lay.add_argument("--expires-days", type=int, default=365, help="the layout's lifetime (365 days)")
    lay.add_argument("--wheel", action="store_true", help="the chain ends in a wheel too")
    add_sign_key(lay, images=False)
    lay.set_defaults(func=cmd_layout)
