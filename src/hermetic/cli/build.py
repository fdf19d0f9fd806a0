"""`hermetic fetch`, `source prune`, `build llvm`, `variants`, `all`: the build pipeline's commands."""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from hermetic.build import llvm, wheel
from hermetic.cli.common import (
    add_bundle,
    add_command,
    add_group,
    add_options,
    add_sign_key,
    out,
    out_json,
    overrides,
    say,
)
from hermetic.core import platforms
from hermetic.core.log import stderr_log
from hermetic.fetch import prune, sources, toolchain, wheelhouse
from hermetic.model import recipe, toolchains, wheels
from hermetic.model.record import load_build_record, write_json
from hermetic.oci.image import spec_from_record
from hermetic.oci.index import merge_layouts
from hermetic.plan import bundle
from hermetic.plan import pipeline as plan
from hermetic.plan.substitute import Finder

if TYPE_CHECKING:
    from hermetic.cli.common import Common, Subparsers
    from hermetic.core.log import Log
    from hermetic.model.settings import Settings


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    rec = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
    variant = recipe.resolve_variant(rec, settings.variant)
    # the wheels built against this variant and release: their sdists and requirements are fetched too
    fit, _ = wheels.matching_recipes(settings.recipes_dir, rec.version, rec.default_version, variant.name,
                                    tuple(variant.values("targets")))
    # Selected first: a toolchain that cannot serve --arch is refused before anything is downloaded.
    arch = platforms.zig_arch(settings.arch or platforms.machine_arch())
    tc = toolchains.select(toolchains.load(settings.toolchain_dir), settings.toolchain, settings.glibc, arch)
    got = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    house = wheelhouse.fetch_wheelhouses(settings, log, fit)
    sdists = [wheel.sdist_fetch(settings, w.sdist, log) for w in fit if w.sdist]
    compiler = toolchain.ensure(settings.cache_dir, tc, settings.mirrors, settings.use_urls, log)
    out_json(got.as_json() | {"path": str(got.path), "wheelhouse": str(house),
                              "toolchain": {"label": tc.label, "path": str(compiler) if compiler else None}}
             | ({"sdists": [{"file": c.pin.file, "sha256": c.pin.sha256, "origin": c.origin, "path": str(c.path)}
                            for c in sdists]} if sdists else {}))
    return 0


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    log = stderr_log(settings.quiet)
    rec = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
    variant = recipe.resolve_variant(rec, settings.variant)
    src = sources.fetch(settings.cache_dir, rec, settings.mirrors, settings.use_urls, settings.use_apt, log)
    meta = prune.ensure_pruned(settings.cache_dir, rec, src, variant, log)
    if args.output:
        dest = Path(args.output)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(meta["path"], dest / meta["file"])
        write_json(dest / "pruned.json", meta)
        meta = meta | {"path": str(dest / meta["file"])}
    out_json(meta, sort_keys=True)
    return 0


def cmd_build_llvm(args: argparse.Namespace, settings: Settings) -> int:
    settings = bundle.from_bundle(getattr(args, "bundle", None), settings, getattr(args, "insecure", False))
    log = stderr_log(settings.quiet)
    # The same plan as `hermetic all`, narrowed to the build and the steps it needs.
    job = plan.plan_all(
        settings, log, args.source, overrides=overrides(args.option), force=args.force, keep_build=args.keep_build,
        through="build", substitutes=_substitutes(settings),
    )
    say(settings, job.render())
    plan.execute(job, log)
    build = job.step("build")
    out_dir = llvm.build_dir(settings, job.build)
    result = load_build_record(out_dir / "record.json")
    if build.state == plan.DONE:
        log(f"build: {result.recipe.name}-{job.variant} is up to date ({result.tree.digest})")
    shown = {"variant": result.variant, "prefix": result.prefix, "install_root": result.install_root,
             "wall_time_s": result.wall_time_s, "tree_digest": result.tree.digest, "record": str(out_dir / "record.json")}
    # wall_time_s is then the building machine's: say where the tree came from
    shown |= {k: v for k, v in (("substituted", result.substituted), ("substitute_refused", result.substitute_refused)) if v}
    if result.compile_cache and build.state != plan.DONE:
        shown["compile_cache"] = result.compile_cache.as_json()
    if result.distributed and build.state != plan.DONE:
        shown["distributed"] = result.distributed.as_json()
    out_json(shown)
    return 0


def _substitutes(settings: Settings) -> Finder | None:
    """The settings' substitutes, asked with this environment's credentials (oci/http.py reads them)."""
    return Finder(settings.substitutes, os.environ) if settings.substitutes else None


def cmd_variants(args: argparse.Namespace, settings: Settings) -> int:
    rec = recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root)
    for v in rec.variants:
        mark = " (default)" if v.name == rec.default_variant else ""
        out(f"{v.name}{mark}: {v.description}")
        for k, val in v.options:
            out(f"    {k} = {val}")
    return 0


def cmd_all(args: argparse.Namespace, settings: Settings) -> int:
    settings = bundle.from_bundle(getattr(args, "bundle", None), settings, getattr(args, "insecure", False))
    log = stderr_log(settings.quiet)
    if len(settings.arches) > 1:
        return _all_arches(args, settings, log)
    job = plan.plan_all(settings, log, args.source, substitutes=_substitutes(settings))
    out(job.render())
    plan.execute(job, log)
    out("all: done")
    return 0


def _all_arches(args: argparse.Namespace, settings: Settings, log: Log) -> int:
    """`hermetic all --arch amd64,arm64`: the main job once per architecture, then one image index.

    Each architecture has a work directory of its own (WORK_DIR/linux-ARCH): a build directory
    holds one variant's build, and the two builds share nothing but the verified cache.
    All plans are made (and shown) before anything runs.
    """
    jobs = []
    for arch in settings.arches:
        one = replace(settings, arch=arch, arches=(arch,), work_dir=settings.work_dir / f"linux-{arch}")
        jobs.append((one, plan.plan_all(one, log, args.source, substitutes=_substitutes(one))))
    variant = jobs[0][1].variant
    name = jobs[0][1].build_path.split("/")[0]  # the recipe's name
    index_dir = settings.work_dir / "images" / f"{name}-{variant}-index"
    for one, job in jobs:
        out(f"linux/{one.arch} (work dir {one.work_dir}):")
        out(job.render())
    out(f"index: {name}-{variant} for {', '.join(f'linux/{a}' for a in settings.arches)} -> {index_dir}")
    layouts = []
    for one, job in jobs:
        log(f"==> linux/{one.arch}")
        plan.execute(job, log)
        record_json = llvm.build_dir(one, job.build) / "record.json"
        layouts.append(one.work_dir / "images" / spec_from_record(record_json).name)
    root = merge_layouts(layouts, index_dir)
    out(f"all: done; index {root.digest} ({len(layouts)} platforms) in {index_dir}")
    return 0


def register(subparsers: Subparsers, common: Common) -> None:
    p = add_command(subparsers, "fetch", "fill the verified cache: sources, the pinned wheelhouse and the pinned toolchain", [common.build])
    p.set_defaults(func=cmd_fetch)

    src_sub = add_group(subparsers, "source", "source archive operations", "source_command")
    p = add_command(src_sub, "prune", "write the deterministic source subset of a variant", [common.build])
    p.add_argument("--output", help="also copy the pruned archive and pruned.json into this directory")
    p.set_defaults(func=cmd_prune)

    b_sub = add_group(subparsers, "build", "build a component", "build_command")
    p = add_command(b_sub, "llvm", "build an LLVM variant into an install tree", [common.build])
    p.add_argument("--source", default="pruned", help="pruned (default), full, or a path to a (pruned) archive")
    p.add_argument("--option", action="append", help="override a recipe option, KEY=VALUE; repeatable")
    p.add_argument("--keep-build", action="store_true", help="keep the build directory (Conan home) afterwards")
    p.add_argument("--force", action="store_true", help="rebuild even if an identical build is recorded")
    add_options(p, "substitution", "compile cache", "distribution")
    add_bundle(p)
    p.set_defaults(func=cmd_build_llvm)

    p = add_command(subparsers, "variants", "list the recipe's variants", [common.base])
    p.set_defaults(func=cmd_variants)

    p = add_command(
        subparsers, "all", "the main job: fetch, prune, build, image and wheel of the default variant", [common.build]
    )
    p.add_argument("--source", default="pruned", help="pruned (default), full, or a path to a (pruned) archive")
    add_options(p, "substitution", "compile cache", "distribution")
    add_bundle(p)
    add_sign_key(p, images=False)
    # --arch amd64,arm64: each architecture's job, then their images merged into one index.
    p.set_defaults(func=cmd_all, multi_arch=True)
