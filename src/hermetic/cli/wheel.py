"""`hermetic wheel` and `hermetic wheelhouse`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import wheel
from ..attest import attest_wheel
from ..log import stderr_log
from ..settings import Settings
from ..wheelhouse import fetch_wheelhouse
from .common import Common, Subparsers, add_command, out, out_json


def cmd_wheel(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    job = wheel.plan(
        settings,
        Path(args.project) if args.project else None,
        Path(args.llvm),
        Path(args.output) if args.output else None,
        settings.wheelhouse,
    )
    rec = wheel.build_wheel(settings, job, log)
    sbom, prov = attest_wheel(settings, job.output / rec.wheel)
    log(f"wheel: SBOM {sbom.name}, provenance {prov.name}")
    out_json({"wheel": rec.wheel, "sha256": rec.sha256, "tag": rec.tag, "glibc_required": rec.glibc_required}
             | {"path": str(job.output / rec.wheel), "record": str(job.output / "wheel-record.json")})
    return 0


def cmd_wheelhouse(args: argparse.Namespace, settings: Settings) -> int:
    path = fetch_wheelhouse(settings, stderr_log(settings.quiet), dest=Path(args.dest).absolute() if args.dest else None)
    out(str(path))
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    p = add_command(
        subparsers, "wheel", "build the compiler core's wheel against an LLVM prefix, offline and reproducibly", [common.build]
    )
    p.add_argument("project", nargs="?", metavar="PROJECT", help="the project to build (default: src/compiler)")
    p.add_argument("--llvm", required=True, metavar="PREFIX", help="LLVM install prefix (holding lib/cmake/llvm)")
    p.add_argument("--output", metavar="DIR", help="where the wheel and wheel-record.json go (default: WORK_DIR/wheels)")
    p.set_defaults(func=cmd_wheel)

    w = add_command(
        subparsers, "wheelhouse", "download the hash-pinned build requirements (part of `hermetic fetch`)", [common.build]
    )
    w.add_argument("--dest", metavar="DIR", help="fill this directory instead of CACHE/wheelhouse")
    w.set_defaults(func=cmd_wheelhouse)
