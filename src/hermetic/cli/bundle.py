"""`hermetic bundle`, and `--bundle REF|DIR` for the commands that build: one artifact with every input of a plan."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.attest.image_signatures import sign_layout
from hermetic.cli.common import add_command, add_sign_key, out, say, signing_key
from hermetic.core.log import stderr_log
from hermetic.core.platforms import machine_arch
from hermetic.model import recipe, wheels
from hermetic.oci import bundle as bundle_format
from hermetic.oci.layout import Layout
from hermetic.plan import bundle
from hermetic.plan import pipeline as plan

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings


def cmd_bundle(args: argparse.Namespace, settings: Settings) -> int:
    log: Log = stderr_log(settings.quiet)
    rec = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
    part = bundle.recipe_part(settings)
    job = plan.plan_all(settings, log, "pruned", through="wheel")
    files = bundle.collect(settings, settings.variant, log, with_release=args.with_release)
    exclude = wheels.load_wheel_recipe(settings.recipes_dir, wheels.DEFAULT_RECIPE).exclude
    root = bundle.root_tar(settings.root, rec.source_date_epoch, exclude, (part,))
    arch = settings.arch or machine_arch()
    name = f"bundle-{rec.name}-{job.variant}-{rec.version}-linux-{arch}"
    plan_doc = {"variant": job.variant, "llvm": rec.version, "arch": arch, "recipe_digest": rec.digest(),
                "steps": [{"key": s.key, "name": s.name, "inputs_digest": s.inputs_digest} for s in job.steps],
                "shown": job.render()}
    out_dir = Path(args.output) if args.output else settings.work_dir / "bundles" / name
    desc = bundle_format.write(out_dir, name, files, root, plan_doc, bundle_format.RecipeRef(part, rec.version, rec.digest()))
    opened = bundle_format.open_layout(out_dir)
    for line in bundle_format.summary(opened):
        say(settings, "  " + line)
    total = sum(e.size for e in opened.entries)
    key = signing_key(settings)
    if key is not None and args.identity:
        sign_layout(Layout(out_dir), key, args.identity)
        say(settings, f"bundle: signed as {args.identity}")
    out(f"{name} {desc.digest} {out_dir.resolve()} ({total / 1e6:.1f} MB in {len(opened.entries)} inputs)")
    return 0


def cmd_bundle_show(args: argparse.Namespace, settings: Settings) -> int:
    opened = bundle_format.open_layout(Path(args.bundle_dir))
    out(f"{opened.name} {opened.manifest.digest}")
    for line in bundle_format.summary(opened):
        out("  " + line)
    plan_blob = next(e for e in opened.entries if e.role == "plan")
    shown = json.loads(opened.layout.blob_path("sha256:" + plan_blob.sha256).read_text()).get("shown", "")
    out(shown)
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    p = add_command(
        subparsers, "bundle",
        "write every input of the variant's plan (checkout data, pruned source, toolchain, wheelhouse, sdists, the "
        "plan) as one content-addressed OCI artifact, for `--bundle` rebuilds without network",
        [common.build],
    )
    p.add_argument("--output", metavar="DIR", help="the layout to write (default: WORK_DIR/bundles/<name>)")
    p.add_argument("--with-release", action="store_true",
                   help="carry the whole release archive too (for `--source full` and for pruning again)")
    p.add_argument("--identity", metavar="REGISTRY/REPO:TAG", help="with --sign-key: sign the bundle as this reference")
    add_sign_key(p, images=False)
    p.set_defaults(func=cmd_bundle)

    s = add_command(subparsers, "bundle-show", "list a bundle's inputs and the plan it was made for", [common.base])
    s.add_argument("bundle_dir", metavar="DIR")
    s.set_defaults(func=cmd_bundle_show)

