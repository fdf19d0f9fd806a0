"""`hermetic image`, `push`, `pull`, `verify-tree`; the work happens in oci/ (layout, registry, unpack).

This is the edge: it reads os.environ (for registry credentials) once and
passes plain values below.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest.attach import attest_image
from hermetic.attest.image_signatures import image_subjects, sign_layout
from hermetic.attest.image_signatures import pull_into_layout as pull_signatures
from hermetic.attest.image_signatures import push_from_layout as push_signatures
from hermetic.cli.common import (
    add_command,
    add_group,
    add_platform,
    add_registry_options,
    add_setting,
    add_sign_key,
    gpg_sign,
    identity_of,
    out,
    parse_size,
    say,
    signing_key,
)
from hermetic.core.errors import UsageError, VerifyError
from hermetic.model import recipe
from hermetic.model.record import load_build_record
from hermetic.oci.bundle import is_bundle
from hermetic.oci.http import set_document_limit
from hermetic.oci.image import kept_image, spec_from_record, write_image
from hermetic.oci.index import merge_layouts
from hermetic.oci.layer import COMPRESSIONS, check_compression, compressor_version
from hermetic.oci.layout import Layout, pick_root
from hermetic.oci.referrers import ANN_TITLE, referrers
from hermetic.oci.referrers_registry import pull_referrers, push_referrers
from hermetic.oci.registry import DEFAULT_CHUNK, Progress, make_client
from hermetic.oci.targets import make_parents, parse_image_source, pull_target, remove_created
from hermetic.oci.transfer import pull_layout, pull_local, push_layout
from hermetic.oci.types import INDEX_TYPES, LayoutRef, Reference, parse_reference
from hermetic.oci.unpack import unpack_layout, verify_tree
from hermetic.plan import substitute

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers, parse_size
    from hermetic.model.settings import Settings
    from hermetic.oci.types import Descriptor



def record_path(settings: Settings, rec: recipe.Recipe, variant: str) -> Path:
    return settings.work_dir / rec.build_path(variant) / "record.json"


def cmd_image_llvm(args: argparse.Namespace, settings: Settings) -> int:
    check_compression(args.compression)
    if args.record:
        rec = Path(args.record)
        variant = settings.variant or ""  # the record names its variant
    else:
        llvm_recipe = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
        variant = settings.variant or llvm_recipe.default_variant
        rec = record_path(settings, llvm_recipe, variant)
    spec = spec_from_record(rec, arch=args.arch)
    if args.record is None and spec.variant != variant:
        raise VerifyError(f"{rec} is a record of variant {spec.variant!r}, not {variant!r}", "", "rebuild the variant")
    output = Path(args.output) if args.output else settings.work_dir / "images" / spec.name
    kept = kept_image(load_build_record(rec), output, args.compression)
    if kept is not None:
        # The layout a substitution pulled: the same tree, the digest the substitute published, and the
        # attestations of the machine that built it; writing and attesting it again here would replace those.
        out(f"{spec.name} {kept.digest} {output.resolve()}")
        say(settings, f"  pulled from {load_build_record(rec).substituted}, kept as it is")
        for r in referrers(Layout(output), subject=kept.digest):
            say(settings, f"  {r.kind} {r.digest} (referrer of {kept.digest}, outside the image)")
        return 0
    say(settings, f"image {spec.name}: layer of {spec.install_root}{spec.prefix}")
    result = write_image(spec, output, args.compression)
    out(f"{result.name} {result.manifest.digest} {result.layout}")
    if not args.no_attest:
        for att in attest_image(settings, result.layout, rec):
            say(settings, f"  {att.kind} {att.digest} (referrer of {result.manifest.digest}, outside the image)")
    say(
        settings,
        f"  layer {result.layer.size / 1e6:.1f} MB {args.compression} ({compressor_version(args.compression)}; "
        f"{result.layer.tar_size / 1e6:.1f} MB tar, {result.layer.entries} entries) in {result.seconds:.1f} s",
    )
    return 0


def cmd_image_index(args: argparse.Namespace, settings: Settings) -> int:
    root = merge_layouts([Path(p) for p in args.layouts], Path(args.output))
    out(f"{root.ref_name} {root.digest} {Path(args.output).resolve()}")
    return 0


def _client(args: argparse.Namespace, settings: Settings, ref: Any) -> Any:
    set_document_limit(args.max_manifest_size)
    return make_client(
        ref, insecure=args.insecure, environ=os.environ, progress=Progress(enabled=not settings.quiet),
        ca_file=Path(args.ca) if args.ca else None,
    )


def cmd_push(args: argparse.Namespace, settings: Settings) -> int:
    ref = parse_reference(args.ref)
    layout = Layout(Path(args.layout))
    client = _client(args, settings, ref)
    try:
        result = push_layout(client, layout, ref, chunk_size=args.chunk_size, mount_from=args.mount_from)
        s = result.stats
        say(
            settings,
            f"pushed {len(s.uploaded)} blobs, {len(s.skipped)} already present, {len(s.mounted)} mounted, "
            f"{s.bytes_sent / 1e6:.1f} MB in {s.seconds:.1f} s ({s.retries} retries)",
        )
        out(f"{ref} {result.digest}")
        _push_signatures(args, client, layout, ref, settings)
        if not args.no_attestations and not is_bundle(layout):  # a bundle is an input, not a built image
            _push_attestations(client, layout, ref, result.digest, args.chunk_size, settings)
    finally:
        client.close()
    return 0


def _push_signatures(args: argparse.Namespace, client: Any, layout: Layout, ref: Any, settings: Settings) -> None:
    """Sign as the destination when a key is given; push every signature the layout holds to `sha256-<hex>.sig`."""
    key = signing_key(settings)
    if key is not None:
        sign_layout(layout, key, identity_of(ref))
    digests = [d.digest for d in image_subjects(layout)]
    pushed = push_signatures(client, layout, ref.repository, digests, identity_of(ref))
    for p in pushed:
        out(f"{ref.registry}/{ref.repository}:{p.tag} {p.count} signature(s) of {p.subject}")
    gpg = gpg_sign(args, ref, digests)
    for path in gpg:
        out(f"{path} (OpenPGP signature of {ref})")
    if not pushed and not gpg:
        say(settings, f"{ref}: unsigned (no signing key: pass --sign-key, --gpg-key, or set $HERMETIC_SIGNING_KEY_FILE)")


def _push_attestations(client: Any, layout: Layout, ref: Any, digest: str, chunk: int, settings: Settings) -> None:
    root = pick_root(layout)
    subjects = {digest, *(c.digest for c in layout.children(root))} if root.media_type in INDEX_TYPES else {digest}
    pushed = push_referrers(client, layout, ref.repository, subjects, chunk)
    if not pushed:
        say(settings, f"no attestations in {layout.path} (write them with `hermetic attest {layout.path}`)")
    for p in pushed:
        out(f"{ref.registry}/{ref.repository}@{p.digest} {p.artifact_type} -> {p.subject} ({p.via})")
    # Last: the tags substituting machines look up, once everything they will check is there.
    images = list(layout.children(root)) if root.media_type in INDEX_TYPES else [root]
    tagged = substitute.publish(client, layout, ref.repository, images)
    for tag, image in tagged:
        out(f"{ref.registry}/{ref.repository}:{tag} {image} (inputs tag, for --substitute)")
    if len(tagged) < len(images):
        say(settings, f"{len(images) - len(tagged)} image(s) have no build record attached, so no inputs tag: "
                      f"`hermetic attest {layout.path}` attaches it")


def cmd_pull(args: argparse.Namespace, settings: Settings) -> int:
    set_document_limit(args.max_manifest_size)
    target = pull_target(args.unpack or args.layout, "--unpack" if args.unpack else "--layout")
    attestations = target.with_name(target.name + ".attestations")
    if args.unpack and args.with_attestations and os.path.lexists(attestations):
        raise UsageError(
            f"{attestations} exists",
            "--with-attestations writes the attestations' files there, and hermetic does not replace what it did not write",
            "move it away, or pull without --with-attestations",
        )
    src = parse_image_source(args.ref)
    if isinstance(src, LayoutRef) and args.with_attestations:
        raise UsageError(
            "--with-attestations needs a registry",
            f"{src} is a local layout: its attestations are already in it (referrers.json)",
            "drop --with-attestations, or pull from a registry",
        )
    created = make_parents(target.parent)
    try:
        _pull(args, settings, src, target, attestations)
    except BaseException:
        remove_created(created)  # a refused pull leaves nothing, the directories above it included
        raise
    return 0


def _pull(args: argparse.Namespace, settings: Settings, src: Reference | LayoutRef, target: Path, attestations: Path) -> None:
    """Pull into target, printing the result lines. --unpack stages the layout in a fresh directory beside target."""
    client = None if isinstance(src, LayoutRef) else _client(args, settings, src)

    def pull_into(dest: Path, option: str) -> Descriptor:
        if client is None:
            assert isinstance(src, LayoutRef)
            return pull_local(src, dest, arch=args.arch, option=option)
        assert isinstance(src, Reference)
        return pull_layout(client, src, dest, arch=args.arch, option=option)

    try:
        if args.layout:
            desc = pull_into(target, "--layout")
            out(f"{src} {desc.digest} {target}")
            if client is not None and args.with_attestations:
                _pull_attestations(client, src, desc.digest, Layout(target), None, None, settings)
            return
        stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.pull-", dir=target.parent))
        try:
            pulled = pull_into(stage / "layout", "--unpack")
            if client is not None and args.with_attestations:
                _pull_attestations(client, src, pulled.digest, Layout(stage / "layout"), stage / "att", attestations, settings)
            desc = unpack_layout(Layout(stage / "layout"), target, progress=lambda m: say(settings, m), warn=warn)
            if (stage / "att").is_dir():
                os.rename(stage / "att", attestations)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        out(f"{src} {desc.digest} {target}")
    finally:
        if client is not None:
            client.close()


def _pull_attestations(
    client: Any, ref: Any, digest: str, layout: Layout, files_to: Path | None, shown: Path | None, settings: Settings
) -> None:
    """The image's referrers into the layout; with files_to, their payloads as files there too (later moved to shown)."""
    got, via = pull_referrers(client, ref.repository, digest, layout)
    if files_to is not None and got:
        files_to.mkdir(parents=True, exist_ok=True)
    for r in got:
        where = ""
        if files_to is not None and shown is not None:
            title = str((r.manifest.get("layers") or [{}])[0].get("annotations", {}).get(ANN_TITLE, r.digest[7:19]))
            shutil.copyfile(r.payload, files_to / Path(title).name)
            where = f" {shown / Path(title).name}"
        out(f"{ref.registry}/{ref.repository}@{r.digest} {r.artifact_type} -> {r.subject} ({via}){where}")
    if not got:
        say(settings, f"{ref}: no attestations ({via})")
    signed = pull_signatures(client, ref.repository, digest, layout, pick_root(layout))
    say(settings, f"{ref}: {signed} signature(s) of {digest}" if signed else f"{ref}: unsigned")


def warn(text: str) -> None:
    """A warning on stderr, --quiet or not: something was changed on the user's behalf."""
    print(text, file=sys.stderr, flush=True)


def cmd_verify_tree(args: argparse.Namespace, settings: Settings) -> int:
    diffs = verify_tree(Path(args.dir), Path(args.record))
    if diffs:
        shown = "\n    ".join(diffs[:20]) + (f"\n    … {len(diffs) - 20} more" if len(diffs) > 20 else "")
        raise VerifyError(
            f"{args.dir} differs from {args.record} in {len(diffs)} entries",
            shown,
            "unpack the image again (`hermetic pull REF --unpack DIR`) into a new directory",
        )
    say(settings, f"{args.dir} matches {args.record}")
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    image_sub = add_group(subparsers, "image", "write OCI image layouts", "image_command")

    llvm = add_command(image_sub, "llvm", "an OCI image layout of a built LLVM variant", [common.base])
    add_setting(llvm, "variant", "variant to package")
    add_setting(llvm, "llvm_version", "the release whose build to package")
    add_setting(llvm, "llvm_recipe", "the recipe whose build to package")
    llvm.add_argument("--record", help="build record to package (default: WORK_DIR/<recipe>/VARIANT/record.json)")
    add_sign_key(llvm, images=False)
    llvm.add_argument("--output", help="layout directory (default: WORK_DIR/images/<image name>)")
    llvm.add_argument(
        "--compression",
        default="gzip",
        choices=COMPRESSIONS,
        help="layer compression: gzip (default, every reader) or zstd (smaller; Debian 12's umoci cannot read it)",
    )
    llvm.add_argument("--arch", help="OCI architecture to record (default: the build's)")
    llvm.add_argument(
        "--no-attest", action="store_true", help="do not write the SBOM and provenance into the layout (referrers)"
    )
    llvm.set_defaults(func=cmd_image_llvm)

    index = add_command(image_sub, "index", "merge per-architecture layouts into one index", [common.base])
    index.add_argument("layouts", nargs="+", metavar="LAYOUT")
    index.add_argument("--output", required=True, help="layout directory to write")
    index.set_defaults(func=cmd_image_index)

    push = add_command(subparsers, "push", "push an image layout to a registry", [common.base])
    push.add_argument("layout", metavar="LAYOUT")
    push.add_argument("ref", metavar="REF", help="REGISTRY/REPOSITORY[:TAG]")
    add_registry_options(push)
    push.add_argument(
        "--chunk-size", type=parse_size, default=DEFAULT_CHUNK, help="blobs above this go up in chunks (default 16M)"
    )
    push.add_argument(
        "--mount-from",
        action="append",
        default=[],
        metavar="REPO",
        help="mount blobs from this repository of the same registry",
    )
    push.add_argument(
        "--no-attestations", action="store_true", help="do not attach the layout's SBOM and provenance (OCI referrers)"
    )
    add_sign_key(push)
    push.set_defaults(func=cmd_push)

    pull = add_command(subparsers, "pull", "pull an image into a layout or unpack it", [common.base])
    pull.add_argument("ref", metavar="REF", help="REGISTRY/REPO[:TAG|@DIGEST], or a local layout: oci:DIR[:TAG] or DIR")
    where = pull.add_mutually_exclusive_group(required=True)
    where.add_argument("--layout", metavar="DIR", help="write an OCI image layout")
    where.add_argument("--unpack", metavar="DIR", help="unpack the image's filesystem into DIR (new or empty)")
    add_registry_options(pull)
    add_platform(pull, "to pull from a multi-platform image")
    pull.add_argument(
        "--with-attestations",
        action="store_true",
        help="also fetch the image's SBOM and provenance (OCI referrers; with --unpack into DIR.attestations/)",
    )
    pull.set_defaults(func=cmd_pull)

    vt = add_command(subparsers, "verify-tree", "compare an unpacked tree with its build record", [common.base])
    vt.add_argument("dir", metavar="DIR")
    vt.add_argument("--record", required=True, help="the record.json of the build")
    vt.set_defaults(func=cmd_verify_tree)
