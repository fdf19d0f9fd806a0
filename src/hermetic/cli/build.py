"""`hermetic fetch`, `source prune`, `build llvm`, `variants`, `all`: the build pipeline's commands."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from .. import llvm, pipeline, recipe, sources
from ..log import stderr_log
from ..record import write_json
from ..settings import Settings
from ..wheelhouse import fetch_wheelhouse
from .common import Subparsers, out, out_json, overrides


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    rec = recipe.load(settings.recipes_dir)
    recipe.resolve_variant(rec, settings.variant)
    got = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    house = fetch_wheelhouse(settings, log)
    out_json(got.as_json() | {"path": str(got.path), "wheelhouse": str(house)})
    return 0


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    rec = recipe.load(settings.recipes_dir)
    variant = recipe.resolve_variant(rec, settings.variant)
    src = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    meta = pipeline.ensure_pruned(settings, rec, src, variant, log)
    if args.output:
        dest = Path(args.output)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(meta["path"], dest / meta["file"])
        write_json(dest / "pruned.json", meta)
        meta = meta | {"path": str(dest / meta["file"])}
    out_json(meta, sort_keys=True)
    return 0


def cmd_build_llvm(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    rec = recipe.load(settings.recipes_dir)
    variant = recipe.resolve_variant(rec, settings.variant, overrides(args.option))
    inputs = pipeline.build_inputs(settings, rec, variant, args.source, log)
    prev = None if args.force else pipeline.finished_build(settings, inputs)
    if prev is not None:
        log(f"build: llvm-{variant.name} is up to date ({prev.tree.digest})")
        result = prev
    else:
        result = llvm.build(settings, inputs, log, keep_build=args.keep_build)
    out_json({"variant": result.variant, "prefix": result.prefix, "install_root": result.install_root,
              "wall_time_s": result.wall_time_s}
             | {"tree_digest": result.tree.digest, "record": str(llvm.build_dir(settings, variant.name) / "record.json")})
    return 0


def cmd_variants(args: argparse.Namespace, settings: Settings) -> int:
    rec = recipe.load(settings.recipes_dir)
    for v in rec.variants:
        mark = " (default)" if v.name == rec.default_variant else ""
        out(f"{v.name}{mark}: {v.description}")
        for k, val in v.options:
            out(f"    {k} = {val}")
    return 0


def cmd_all(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    steps = pipeline.plan_all(settings, log, args.source)
    out(pipeline.render_plan(steps))
    pipeline.execute(steps)
    out("all: done")
    return 0


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("fetch", parents=[common], help="fill the verified source cache")
    p.set_defaults(func=cmd_fetch)

    src = subparsers.add_parser("source", help="source archive operations")
    src_sub = src.add_subparsers(dest="source_command", metavar="ACTION")
    p = src_sub.add_parser("prune", parents=[common], help="write the deterministic source subset of a variant")
    p.add_argument("--output", help="also copy the pruned archive and pruned.json into this directory")
    p.set_defaults(func=cmd_prune)

    b = subparsers.add_parser("build", help="build a component")
    b_sub = b.add_subparsers(dest="build_command", metavar="WHAT")
    p = b_sub.add_parser("llvm", parents=[common], help="build an LLVM variant into an install tree")
    p.add_argument("--source", default="pruned", help="pruned (default), full, or a path to a (pruned) archive")
    p.add_argument("--option", action="append", help="override a recipe option, KEY=VALUE; repeatable")
    p.add_argument("--keep-build", action="store_true", help="keep the build directory (Conan home) afterwards")
    p.add_argument("--force", action="store_true", help="rebuild even if an identical build is recorded")
    p.set_defaults(func=cmd_build_llvm)

    p = subparsers.add_parser("variants", parents=[common], help="list the recipe's variants")
    p.set_defaults(func=cmd_variants)

    p = subparsers.add_parser("all", parents=[common], help="the main job: fetch, prune, build, image and wheel of the default variant")
    p.add_argument("--source", default="pruned", help="pruned (default), full, or a path to a (pruned) archive")
    p.set_defaults(func=cmd_all)
