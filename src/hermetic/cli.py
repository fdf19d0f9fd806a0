"""Command-line parsing only: arguments become Settings, then a command runs."""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import __version__, llvm, pipeline, recipe, sources
from .errors import EnvironmentError_, HermeticError, RecipeError, disk_full
from .settings import Settings, resolve

Handler = Callable[[argparse.Namespace, Settings], int]


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("common options")
    # SUPPRESS keeps options the user did not give out of the namespace, so env and pyproject can fill them.
    s = argparse.SUPPRESS
    g.add_argument("--root", default=s, help="hermetic checkout holding recipes/ and toolchain/")
    g.add_argument("--cache", dest="cache_dir", default=s, help="source cache (HERMETIC_CACHE; ~/.cache/hermetic)")
    g.add_argument("--work-dir", dest="work_dir", default=s, help="where builds happen (HERMETIC_WORK_DIR; ./build)")
    g.add_argument("--variant", default=s, help="recipe variant (HERMETIC_VARIANT; nvptx)")
    g.add_argument("--mirror", dest="mirrors", action="append", default=s, help="directory holding source archives; repeatable")
    g.add_argument("--offline", choices=("auto", "require", "off"), default=s, help="network isolation of build steps (auto)")
    g.add_argument("-j", "--jobs", type=int, default=s, help="parallel build jobs (all cores)")
    g.add_argument("-q", "--quiet", action="store_true", default=s, help="no progress output")
    g.add_argument("--no-apt", dest="use_apt", action="store_false", default=s, help="do not fetch through apt")
    g.add_argument("--no-urls", dest="use_urls", action="store_false", default=s, help="do not download from URLs")
    return p


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    log = pipeline.stderr_log(settings.quiet)
    rec = recipe.load(settings.recipes_dir)
    recipe.resolve_variant(rec, settings.variant)
    got = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    from .wheelhouse import fetch_wheelhouse

    house = fetch_wheelhouse(settings, log)
    print(json.dumps(got.as_json() | {"path": str(got.path), "wheelhouse": str(house)}, indent=2))
    return 0


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    log = pipeline.stderr_log(settings.quiet)
    rec = recipe.load(settings.recipes_dir)
    variant = recipe.resolve_variant(rec, settings.variant)
    src = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    meta = pipeline.ensure_pruned(settings, rec, src, variant, log)
    if args.output:
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        import shutil

        shutil.copyfile(meta["path"], out / meta["file"])
        (out / "pruned.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        meta = meta | {"path": str(out / meta["file"])}
    print(json.dumps(meta, indent=2, sort_keys=True))
    return 0


def _overrides(pairs: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep:
            raise RecipeError(f"bad --option {pair!r}", "expected KEY=VALUE", "e.g. --option targets=NVPTX;X86")
        out[key.strip()] = value.strip()
    return out


def cmd_build_llvm(args: argparse.Namespace, settings: Settings) -> int:
    log = pipeline.stderr_log(settings.quiet)
    rec = recipe.load(settings.recipes_dir)
    variant = recipe.resolve_variant(rec, settings.variant, _overrides(args.option))
    inputs = pipeline.build_inputs(settings, rec, variant, args.source, log)
    prev = None if args.force else pipeline.finished_build(settings, inputs)
    if prev is not None:
        log(f"build: llvm-{variant.name} is up to date ({prev['tree']['digest']})")
        result = prev
    else:
        result = llvm.build(settings, inputs, log, keep_build=args.keep_build)
    print(json.dumps({k: result[k] for k in ("variant", "prefix", "install_root", "wall_time_s")}
                     | {"tree_digest": result["tree"]["digest"], "record": str(llvm.build_dir(settings, variant.name) / "record.json")}, indent=2))
    return 0


def cmd_variants(args: argparse.Namespace, settings: Settings) -> int:
    rec = recipe.load(settings.recipes_dir)
    for v in rec.variants:
        mark = " (default)" if v.name == rec.default_variant else ""
        print(f"{v.name}{mark}: {v.description}")
        for k, val in v.options:
            print(f"    {k} = {val}")
    return 0


def cmd_all(args: argparse.Namespace, settings: Settings) -> int:
    log = pipeline.stderr_log(settings.quiet)
    steps = pipeline.plan_all(settings, log, args.source)
    pipeline.print_plan(steps)
    pipeline.execute(steps)
    print("all: done")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="hermetic",
        description="Reproducible, offline builds of slim LLVM toolchains and the GPU compiler wheels built on them.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"hermetic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("fetch", parents=[common], help="fill the verified source cache")
    p.set_defaults(func=cmd_fetch)

    src = sub.add_parser("source", help="source archive operations")
    src_sub = src.add_subparsers(dest="source_command", metavar="ACTION")
    p = src_sub.add_parser("prune", parents=[common], help="write the deterministic source subset of a variant")
    p.add_argument("--output", help="also copy the pruned archive and pruned.json into this directory")
    p.set_defaults(func=cmd_prune)

    b = sub.add_parser("build", help="build a component")
    b_sub = b.add_subparsers(dest="build_command", metavar="WHAT")
    p = b_sub.add_parser("llvm", parents=[common], help="build an LLVM variant into an install tree")
    p.add_argument("--source", default="pruned", help="pruned (default), full, or a path to a (pruned) archive")
    p.add_argument("--option", action="append", help="override a recipe option, KEY=VALUE; repeatable")
    p.add_argument("--keep-build", action="store_true", help="keep the build directory (Conan home) afterwards")
    p.add_argument("--force", action="store_true", help="rebuild even if an identical build is recorded")
    p.set_defaults(func=cmd_build_llvm)

    p = sub.add_parser("variants", parents=[common], help="list the recipe's variants")
    p.set_defaults(func=cmd_variants)

    p = sub.add_parser("all", parents=[common], help="the main job: fetch, prune, build, image and wheel of the default variant")
    p.add_argument("--source", default="pruned", help="pruned (default), full, or a path to a (pruned) archive")
    p.set_defaults(func=cmd_all)

    for register in _plugins():
        register(sub, common)
    return parser


# Command groups living in their own modules; each has `register(subparsers, common)`.
_COMMAND_MODULES = (
    "hermetic.oci.cli",
    "hermetic.wheel",
    "hermetic.verify",
    "hermetic.attest",
    "hermetic.inspection",
)


def _plugins() -> list[Callable[[Any, argparse.ArgumentParser], None]]:
    out: list[Callable[[Any, argparse.ArgumentParser], None]] = []
    for name in _COMMAND_MODULES:
        module = importlib.import_module(name)
        out.append(module.register)
    return out


_SETTING_KEYS = ("root", "cache_dir", "work_dir", "variant", "mirrors", "offline", "jobs", "quiet", "use_apt", "use_urls")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        cli_values = {k: getattr(args, k) for k in _SETTING_KEYS if hasattr(args, k)}
        settings = resolve(cli_values, os.environ, Path.cwd())
        return func(args, settings)
    except HermeticError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            err: HermeticError = disk_full(str(exc.filename or "?"), exc)
        elif exc.errno in (errno.EACCES, errno.EPERM):
            err = EnvironmentError_(f"permission denied: {exc.filename}", str(exc), "check ownership of that path or choose another --work-dir/--cache")
        else:
            raise
        print(err.render(), file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
