"""`hermetic wheel` and `hermetic wheelhouse`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.attest.attach import attest_wheel
from hermetic.build import wheel
from hermetic.cli.common import add_bundle, add_command, out, out_json
from hermetic.core.errors import UsageError
from hermetic.core.log import stderr_log
from hermetic.core.platforms import machine_arch
from hermetic.fetch import wheelhouse
from hermetic.model import wheels
from hermetic.plan import bundle

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.model.settings import Settings

# `--python` given without a value: list the interpreters instead of building.
LIST_PYTHONS = "\0list"


def _project(args: argparse.Namespace, settings: Settings) -> tuple[str, str]:
    """What is built (for the listing) and its scikit-build-core `wheel.py-api` ('' for a setuptools sdist)."""
    if args.project:
        return args.project, wheel.project_py_api(Path(args.project).resolve())
    wr = wheels.load_wheel_recipe(settings.recipes_dir, args.recipe)
    if wr.sdist is not None:
        return wr.sdist.file, ""
    return wr.project, wheel.project_py_api(settings.root / wr.project)


def cmd_list_pythons(args: argparse.Namespace, settings: Settings) -> int:
    project, api = _project(args, settings)
    current = wheel.current_interpreter().executable
    rows = []
    for i in wheel.find_interpreters(os.environ.get("PATH", "")):
        if not i.headers:
            headers = "headers: missing"
        elif i.multiarch:
            headers = "headers: yes (Debian multiarch pyconfig.h: --toolchain host only)"
        else:
            headers = "headers: yes"
        mark = "  (default: runs hermetic)" if i.executable == current else ""
        rows.append((i.executable, f"{i.implementation} {i.version}", f"tag {i.tag(api)}", headers + mark))
    out(f"python interpreters for {project} (wheel.py-api: {api or 'none'}); pick one with --python PATH_OR_VERSION:")
    widths = [max(len(r[k]) for r in rows) for k in range(3)]
    for r in rows:
        out("  " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
    return 0


def cmd_wheel(args: argparse.Namespace, settings: Settings) -> int:
    settings = bundle.from_bundle(getattr(args, "bundle", None), settings, getattr(args, "insecure", False))
    if args.python == LIST_PYTHONS:
        return cmd_list_pythons(args, settings)
    if not args.llvm:
        wr = wheels.load_wheel_recipe(settings.recipes_dir, args.recipe)
        release = ", ".join(wr.llvm_versions) or "of the LLVM recipe's default release"
        raise UsageError(
            "hermetic wheel needs --llvm PREFIX", f"the {wr.name} wheel links a static LLVM {release}",
            "pass --llvm with an install prefix (e.g. build/llvm/nvptx/install/usr/lib64/llvm-nvptx-19.1.7; "
            "`hermetic build llvm` prints it)",
        )
    if settings.arch and settings.arch != machine_arch() and not args.python:
        raise UsageError(
            f"a wheel for {settings.arch} needs an {settings.arch} Python: --python",
            f"hermetic runs on this {machine_arch()} machine's Python; the extension is compiled against the target "
            "interpreter's headers and named by its EXT_SUFFIX",
            f"pass --python ROOT/usr/bin/python3.X of an {settings.arch} root of Debian's packages, run under qemu-user "
            "(README, \"The arm64 wheel\": tests/debian_root.py makes one)",
        )
    log = stderr_log(settings.quiet)
    python = wheel.resolve_interpreter(args.python, os.environ.get("PATH", "")) if args.python else None
    job = wheel.plan(
        settings,
        Path(args.project) if args.project else None,
        Path(args.llvm),
        Path(args.output) if args.output else None,
        settings.wheelhouse,
        python=python,
        warn=stderr_log(),  # a warning is not progress: --quiet keeps it
        search_path=os.environ.get("PATH", ""),
        recipe_name=args.recipe,
        log=log,
    )
    rec = wheel.build_wheel(settings, job, log)
    sbom, prov = attest_wheel(settings, job.output / rec.wheel)
    log(f"wheel: SBOM {sbom.name}, provenance {prov.name}")
    out_json({"wheel": rec.wheel, "sha256": rec.sha256, "tag": rec.tag, "glibc_required": rec.glibc_required}
             | {"toolchain": rec.toolchain_ref.label}
             | {"path": str(job.output / rec.wheel), "record": str(job.output / "wheel-record.json")})
    return 0


def cmd_wheelhouse(args: argparse.Namespace, settings: Settings) -> int:
    path = wheelhouse.fetch_wheelhouses(settings, stderr_log(settings.quiet), dest=Path(args.dest).absolute() if args.dest else None)
    out(str(path))
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    p = add_command(
        subparsers, "wheel", "build the compiler core's (or a wheel recipe's) wheel against an LLVM prefix, offline and reproducibly",
        [common.build]
    )
    p.add_argument("project", nargs="?", metavar="PROJECT",
                   help="the project to build (default: the recipe's: src/compiler, or a third-party recipe's pinned sdist)")
    p.add_argument("--recipe", default=wheels.DEFAULT_RECIPE, metavar="NAME",
                   help="the wheel recipe, recipes/NAME/wheel.yml: compiler (the default) or another project's "
                   "sdist, e.g. llvmlite")
    p.add_argument("--llvm", metavar="PREFIX", help="LLVM install prefix (holding lib/cmake/llvm); required to build")
    p.add_argument("--output", metavar="DIR", help="where the wheel and wheel-record.json go (default: WORK_DIR/wheels)")
    p.add_argument(
        "--python", nargs="?", const=LIST_PYTHONS, metavar="PATH_OR_VERSION",
        help="the interpreter of the build venv: a path, or X.Y for pythonX.Y on PATH (default: the one running "
        "hermetic); without a value: list the interpreters found, with their headers and wheel tags, and exit",
    )
    add_bundle(p)
    p.set_defaults(func=cmd_wheel)

    w = add_command(
        subparsers, "wheelhouse", "download the hash-pinned build requirements, the LLVM build's and every wheel recipe's (part of `hermetic fetch`)", [common.build]
    )
    w.add_argument("--dest", metavar="DIR", help="fill this directory instead of CACHE/wheelhouse")
    w.set_defaults(func=cmd_wheelhouse)
