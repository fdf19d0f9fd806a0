"""`hermetic inspect`, `attest` and `verify`: the commands that take an artifact of any kind, through one table.

KINDS has a row per kind of artifact (model/artifacts.py tells which kind a path
is) and a cell per action: the workflow that does it, or why the kind has no
such action and what to do instead. A new kind is one row; a command never
asks which kind it holds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest import provenance
from hermetic.attest.attach import attest_image, attest_wheel, image_facts, record_for_image
from hermetic.attest.image_signatures import sign_layout
from hermetic.attest.inspection import (
    inspect_bundle,
    inspect_layout,
    inspect_record,
    inspect_ref,
    inspect_wheel,
    mismatches,
    render,
)
from hermetic.attest.signature_check import check_bundle, check_layout, check_wheel
from hermetic.attest.signing import load_verify_key
from hermetic.cli.common import (
    add_command,
    add_platform,
    add_registry_options,
    add_sign_key,
    out,
    out_json,
    say,
    signing_key,
)
from hermetic.core.errors import UsageError, VerifyError
from hermetic.core.log import stderr_log
from hermetic.model.artifacts import Artifact, Kind, detect, layout_kind
from hermetic.oci.http import set_document_limit
from hermetic.oci.layout import Layout
from hermetic.oci.targets import parse_image_source
from hermetic.oci.types import LayoutRef
from hermetic.verify.rebuild import Mismatch, Report, verify, verify_image, verify_llvm, verify_wheel

if TYPE_CHECKING:
    from hermetic.attest.signature_check import Checked
    from hermetic.attest.signing import VerifyKey
    from hermetic.cli.common import Common, Subparsers
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings

Args = argparse.Namespace
Inspect = Callable[[Path, Args], dict[str, Any]]
Attest = Callable[[Path, Args, "Settings"], None]
CheckSignatures = Callable[[Path, Sequence["VerifyKey"], int, "Settings"], list["Checked"]]
Rebuild = Callable[[Path, Report, Args, "Settings", "Log"], None]


@dataclass(frozen=True)
class Unsupported:
    """An action a kind does not have: why, and what to do instead."""

    why: str
    fix: str


@dataclass(frozen=True)
class Row:
    title: str  # what the commands' help and errors call it
    inspect: Inspect | Unsupported
    stale: tuple[str, str]  # what inspect says when the artifact does not match what is said of it: what, fix
    attest: Attest | Unsupported
    signatures: CheckSignatures | Unsupported  # verify --key
    rebuild: Rebuild | Unsupported  # verify


# -- the cells: each calls one workflow with the options of its command ------------------------------------------


def _attest_image(path: Path, args: Args, settings: Settings) -> None:
    facts, _ = image_facts(Layout(path), args.arch)
    rec = Path(args.record) if args.record else record_for_image(facts, settings.work_dir)
    refs = attest_image(settings, path, rec, builder_id=args.builder_id or provenance.DEFAULT_BUILDER_ID, arch=args.arch)
    for r in refs:
        out(f"{r.kind} {r.digest} -> {facts.name}@{facts.manifest_digest}")
    key = signing_key(settings)
    if key is not None and args.identity:
        for d in sign_layout(Layout(path), key, args.identity):
            out(f"signature {d.digest} as {args.identity}")


def _attest_wheel(path: Path, args: Args, settings: Settings) -> None:
    for p in attest_wheel(settings, path, args.builder_id or provenance.DEFAULT_BUILDER_ID):
        out(str(p))


def _rebuild_llvm(path: Path, report: Report, args: Args, settings: Settings, log: Log) -> None:
    verify_llvm(settings, path, report, args.reuse_pruned, log, args.from_release)


def _rebuild_image(path: Path, report: Report, args: Args, settings: Settings, log: Log) -> None:
    # the common --arch is also which platform of a multi-platform layout
    record = Path(args.record) if args.record else None
    verify_image(settings, path, report, record, args.reuse_pruned, settings.arch, log, args.from_release)


def _rebuild_wheel(path: Path, report: Report, args: Args, settings: Settings, log: Log) -> None:
    verify_wheel(settings, path, report, log)


_BUNDLE_HOLDS = "a bundle holds the inputs of a build, not something built"
_ATTESTATIONS_STALE = ("the attestations of {} do not match it",
                       "attest the artifact again (`hermetic attest`), or find out who changed it")

KINDS: dict[Kind, Row] = {
    Kind.LLVM: Row(
        "an LLVM build record (record.json, or its directory)",
        inspect=lambda path, args: inspect_record(path),
        stale=("the build record of {} does not match",
               "rebuild the variant (`hermetic build llvm --force`), or find out who changed the record or the tree"),
        attest=Unsupported("its SBOM and provenance are those of the image written from it",
                           "write the image (`hermetic image llvm`), then `hermetic attest LAYOUT --record PATH`"),
        signatures=Unsupported("hermetic signs the image written from a build record, not the record",
                               "check the image's signatures: `hermetic verify --key PUB LAYOUT`"),
        rebuild=_rebuild_llvm,
    ),
    Kind.IMAGE: Row(
        "an OCI image layout (one image, or an index of several platforms)",
        inspect=lambda path, args: inspect_layout(path, args.arch),
        stale=_ATTESTATIONS_STALE,
        attest=_attest_image,
        signatures=lambda path, keys, threshold, settings: check_layout(path, keys, threshold, settings.arch),
        rebuild=_rebuild_image,
    ),
    Kind.WHEEL: Row(
        "a wheel (.whl, or its wheel-record.json)",
        inspect=lambda path, args: inspect_wheel(path),
        stale=_ATTESTATIONS_STALE,
        attest=_attest_wheel,
        signatures=lambda path, keys, threshold, settings: check_wheel(path, keys),
        rebuild=_rebuild_wheel,
    ),
    Kind.BUNDLE: Row(
        "a bundle (a layout written by `hermetic bundle`)",
        inspect=lambda path, args: inspect_bundle(path),
        stale=_ATTESTATIONS_STALE,
        attest=Unsupported(f"{_BUNDLE_HOLDS}: there is no build for an SBOM or provenance to describe",
                           "sign it instead (`hermetic bundle --sign-key KEY --identity REF`), "
                           "and attest what is built from it"),
        signatures=lambda path, keys, threshold, settings: check_bundle(path, keys, threshold),
        rebuild=Unsupported(f"{_BUNDLE_HOLDS}: there is nothing in it to rebuild and compare",
                            "check its signature (`hermetic verify --key PUB DIR`), or build from it "
                            "(`--bundle DIR`) and verify what that built"),
    ),
}


def takes(verb: str, action: str, also: str = "") -> str:
    """What a command takes, from the kinds that have the action."""
    titles = [row.title for row in KINDS.values() if not isinstance(getattr(row, action), Unsupported)]
    return f"{verb} takes " + "; ".join([*titles, *([also] if also else [])])


def cell(artifact: Artifact, action: str, verb: str) -> Any:
    """The workflow doing `action` on the artifact's kind; a UsageError where the kind has none."""
    row = KINDS[artifact.kind]
    got = getattr(row, action)
    if isinstance(got, Unsupported):
        raise UsageError(f"cannot {verb} {artifact.path}: it is {row.title}", got.why, got.fix)
    return got


# -- inspect --------------------------------------------------------------------------------------------------

_REFERENCE = "an image in a registry (REGISTRY/REPO[:TAG])"


def cmd_inspect(args: Args, settings: Settings) -> int:
    set_document_limit(args.max_manifest_size)
    found = detect(Path(args.target), "inspect", takes("inspect", "inspect", _REFERENCE))
    if found is None:
        src = parse_image_source(args.target)  # a missing path is "no such file", not a registry host
        if isinstance(src, LayoutRef):
            found = Artifact(layout_kind(src.path), src.path)
    if found is not None:
        report = cell(found, "inspect", "inspect")(found.path, args)
    else:  # an image in a registry
        report = inspect_ref(args.target, args.insecure, args.arch, settings.quiet, ca_file=args.ca, environ=os.environ)
    if args.json:
        out_json(report, sort_keys=True)
    else:
        out(render(report))
    bad = mismatches(report)
    if bad:
        what, fix = KINDS[found.kind if found is not None else Kind.IMAGE].stale
        raise VerifyError(what.format(report["artifact"]["name"]), "; ".join(bad), fix)
    return 0


_INSPECT_HELP = "what an image layout, image reference or wheel is, what it was built from, whether its attestations match"


def register_inspect(subparsers: Subparsers, common: Common) -> None:
    p = add_command(subparsers, "inspect", _INSPECT_HELP, [common.base])
    p.add_argument("target", metavar="LAYOUT|REF|WHEEL", help="an OCI image layout, REGISTRY/REPO[:TAG], a .whl or a record")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_registry_options(p)
    add_platform(p, "of a multi-platform image to inspect")
    p.set_defaults(func=cmd_inspect)


# -- attest ---------------------------------------------------------------------------------------------------


def cmd_attest(args: Args, settings: Settings) -> int:
    path = Path(args.artifact)
    started = time.monotonic()
    found = detect(path, "attest", takes("attest", "attest"))
    if found is None:
        raise UsageError(f"cannot attest {path}: no such file or directory", takes("attest", "attest"), "check the path")
    cell(found, "attest", "attest")(found.path, args, settings)
    signed = "signed with " + str(settings.sign_key) if settings.sign_key else "UNSIGNED (no --sign-key)"
    say(settings, f"attest: done in {time.monotonic() - started:.1f}s; {signed}")
    return 0


def register_attest(subparsers: Subparsers, common: Common) -> None:
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


# -- verify ---------------------------------------------------------------------------------------------------


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


def _check_signatures(args: Args, settings: Settings, found: Artifact, check: CheckSignatures) -> None:
    """--key: the artifact's signatures by those keys (all of them, or --threshold of them); raises on any refusal."""
    keys = [load_verify_key(k) for k in args.key]
    threshold = args.threshold or len(keys)
    if not 1 <= threshold <= len(keys):
        raise UsageError(f"--threshold {args.threshold} with {len(keys)} key(s)", "", "give 1..number of --key")
    for c in check(found.path, keys, threshold, settings):
        out(f"signature: {c.what:<10} {c.detail}")
    out(f"verify: signatures OK ({threshold} of {len(keys)} key(s))")


def cmd_verify(args: Args, settings: Settings) -> int:
    path = _artifact(args.artifact)
    found = detect(path, "verify", takes("verify", "rebuild"))
    if found is None:
        raise UsageError(f"cannot verify {path}: no such file or directory", takes("verify", "rebuild"), "check the path")
    # every action asked for is known to exist for the kind before any of them runs
    check = cell(found, "signatures", "check the signatures of") if args.key else None
    rebuild: Rebuild | None = cell(found, "rebuild", "verify") if args.rebuild or not args.key else None
    if check is not None:
        _check_signatures(args, settings, found, check)
    if rebuild is None:
        return 0
    if shutil.which("diffoscope") is None:
        say(settings, "verify: diffoscope is not installed; a mismatch will be reported without a content diff")
    try:
        report = verify(
            settings, found, lambda rep, log: rebuild(found.path, rep, args, settings, log),
            rebuild_dir=Path(args.rebuild_dir) if args.rebuild_dir else None, keep=args.keep,
            log=stderr_log(settings.quiet),
        )
    except Mismatch as exc:
        _show(exc.report, args.json)  # the report goes to stdout even on a mismatch; the error follows
        raise
    _show(report, args.json)
    return 0


def _show(report: Report, as_json: bool) -> None:
    out_json(report.as_json()) if as_json else out(report.render())


_VERIFY_HELP = "rebuild an LLVM tree, image or wheel from its record elsewhere, later, under another umask; compare"


def register_verify(subparsers: Subparsers, common: Common) -> None:
    p = add_command(subparsers, "verify", _VERIFY_HELP, [common.build])
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
