"""`hermetic inspect`: what an artifact is, what it was built from, whether its attestations match."""

from __future__ import annotations

import argparse
import json
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.attest.attach import WHEEL_RECORD, is_layout
from hermetic.attest.inspection import inspect_layout, inspect_record, inspect_ref, inspect_wheel, mismatches, render
from hermetic.cli.common import add_command, add_platform, add_registry_options, out, out_json
from hermetic.core.errors import UsageError, VerifyError
from hermetic.oci.http import set_document_limit
from hermetic.oci.targets import parse_image_source
from hermetic.oci.types import LayoutRef

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.model.settings import Settings

_WHAT = "inspect takes an image layout directory, REGISTRY/REPO[:TAG], a .whl, or an LLVM build record (record.json)"


def _not_a_record(path: Path) -> UsageError | None:
    """Why a file is no build record, told before the record reader would say "rebuild it"."""
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:2] == b"\x1f\x8b" or head[:4] == b"\x28\xb5\x2f\xfd" or head[:6] == b"\xfd7zXZ\x00":
        return UsageError(f"cannot inspect {path}: it is a compressed file", _WHAT,
                          "if it holds an image layout, extract it (`tar -xf FILE -C DIR`) and inspect DIR")
    if tarfile.is_tarfile(path):
        return UsageError(
            f"cannot inspect {path}: it is a tar archive",
            _WHAT,
            "an OCI layout in a tar: `tar -xf FILE -C DIR`, then `hermetic inspect DIR`; "
            "a `docker save` archive: `skopeo copy docker-archive:FILE oci:DIR`, then `hermetic inspect DIR`",
        )
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(64 << 20))
    except (ValueError, RecursionError):
        return UsageError(f"cannot inspect {path}: it is not JSON, so not a build record", _WHAT, "pass one of those")
    if not isinstance(data, dict) or not {"variant", "tree"} <= data.keys():
        return UsageError(
            f"cannot inspect {path}: it is JSON but not an LLVM build record", _WHAT,
            "a build record is WORK_DIR/llvm/VARIANT/record.json, written by `hermetic build llvm`",
        )
    return None


def cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    set_document_limit(args.max_manifest_size)
    target = Path(args.target)
    if is_layout(target):
        report = inspect_layout(target, args.arch)
    elif target.suffix == ".whl" or target.name == WHEEL_RECORD or (target / WHEEL_RECORD).is_file():
        report = inspect_wheel(target)
    elif target.is_file() or (target / "record.json").is_file():
        path = target if target.is_file() else target / "record.json"
        refused = _not_a_record(path)
        if refused is not None:
            raise refused
        report = inspect_record(path)
    elif target.exists():
        raise UsageError(f"cannot inspect {target}", f"it is not an image layout, a wheel or a build record; {_WHAT}", "pass one of those")
    else:
        src = parse_image_source(args.target)  # a missing path is "no such file", not a registry host
        if isinstance(src, LayoutRef):
            report = inspect_layout(src.path, args.arch)
        else:
            report = inspect_ref(args.target, args.insecure, args.arch, settings.quiet, ca_file=args.ca, environ=os.environ)
    if args.json:
        out_json(report, sort_keys=True)
    else:
        out(render(report))
    bad = mismatches(report)
    if bad:
        if report["artifact"].get("kind") == "llvm-install-tree":
            raise VerifyError(
                f"the build record of {report['artifact']['name']} does not match",
                "; ".join(bad),
                "rebuild the variant (`hermetic build llvm --force`), or find out who changed the record or the tree",
            )
        raise VerifyError(
            f"the attestations of {report['artifact']['name']} do not match it",
            "; ".join(bad),
            "attest the artifact again (`hermetic attest`), or find out who changed it",
        )
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    p = add_command(
        subparsers, "inspect",
        "what an image layout, image reference or wheel is, what it was built from, whether its attestations match",
        [common.base],
    )
    p.add_argument("target", metavar="LAYOUT|REF|WHEEL", help="an OCI image layout, REGISTRY/REPO[:TAG], a .whl or a record")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_registry_options(p)
    add_platform(p, "of a multi-platform image to inspect")
    p.set_defaults(func=cmd_inspect)
