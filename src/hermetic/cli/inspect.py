"""`hermetic inspect`: what an artifact is, what it was built from, whether its attestations match."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..attest import WHEEL_RECORD, is_layout
from ..errors import UsageError, VerifyError
from ..inspection import inspect_layout, inspect_record, inspect_ref, inspect_wheel, mismatches, render
from ..oci.layout import LayoutRef
from ..oci.reference import parse_image_source
from ..settings import Settings
from .common import Common, Subparsers, add_command, add_platform, out, out_json


def cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    target = Path(args.target)
    if is_layout(target):
        report = inspect_layout(target, args.arch)
    elif target.suffix == ".whl" or target.name == WHEEL_RECORD or (target / WHEEL_RECORD).is_file():
        report = inspect_wheel(target)
    elif target.is_file() or (target / "record.json").is_file():
        report = inspect_record(target if target.is_file() else target / "record.json")
    elif target.exists():
        raise UsageError(f"cannot inspect {target}", "it is not an image layout, a wheel or a build record", "")
    else:
        src = parse_image_source(args.target)  # a missing path is "no such file", not a registry host
        if isinstance(src, LayoutRef):
            report = inspect_layout(src.path, args.arch)
        else:
            report = inspect_ref(args.target, args.insecure, args.arch, settings.quiet)
    if args.json:
        out_json(report, sort_keys=True)
    else:
        out(render(report))
    bad = mismatches(report)
    if bad:
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
    p.add_argument("--insecure", action="store_true", help="plain http (a registry on localhost)")
    add_platform(p, "of a multi-platform image to inspect")
    p.set_defaults(func=cmd_inspect)
