"""The runner as a second builder: the image of each variant it built, signed as its reference, and its in-toto links."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .core import Context, Decision, State, Step, StepFailed, run, skip

BUILDS = ("build-support", "build-llvm")  # the steps whose trees are imaged and signed
VARIANT = "{variant}"


def identity_for(ctx: Context, variant: str) -> str | None:
    """The reference the variant's image is signed as: --identity with {variant} filled in; without {variant} in it,
    only the main variant's (one reference names one image)."""
    ref = ctx.opts.identity or ""
    if VARIANT in ref:
        return ref.replace(VARIANT, variant)
    return ref if variant == ctx.opts.variant else None


def image_dir(ctx: Context, variant: str) -> Path:
    return ctx.work / "image" / variant


def image_args(ctx: Context, record: Path | str, variant: str) -> list[str]:
    """The image with its SBOM and provenance, their DSSE envelopes signed with the key (the image's digest is the
    same without them: they are referrers beside it)."""
    return ["image", "llvm", "--record", str(record), "--output", str(image_dir(ctx, variant)), "--work-dir",
            str(ctx.work / "hermetic"), "--sign-key", str(ctx.opts.sign_key), "--quiet"]


def sign_args(ctx: Context, variant: str, ref: str) -> list[str]:
    o = ctx.opts
    return ["sign", str(image_dir(ctx, variant)), "--identity", ref, "--sign-key", str(o.sign_key),
            *(["--gpg-key", str(o.gpg_key), "--lookaside", str(o.lookaside)] if o.gpg_key else [])]


def links_args(ctx: Context, record: Path | str, variant: str) -> list[str]:
    """Its in-toto links, with the wheel built against the main variant's tree."""
    o = ctx.opts
    wheel = ctx.wheel if variant == o.variant else None
    return ["intoto", "links", str(ctx.out / "evidence" / variant), "--record", str(record),
            "--image", str(image_dir(ctx, variant)), *(["--wheel", str(wheel)] if wheel else []),
            *(["--llvm-recipe", o.llvm_recipe] if o.llvm_recipe else []), "--links-only", "--sign-key", str(o.sign_key)]


def built(ctx: Context) -> list[tuple[str, Path, str]]:
    """(variant, record, reference) of each tree built here that is signed."""
    out = []
    for step in BUILDS:
        if step in ctx.records:
            variant = ctx.records[step].variant
            ref = identity_for(ctx, variant)
            if ref:
                out.append((variant, ctx.record_paths[step], ref))
    return out


def unasked(ctx: Context) -> Decision | None:
    return None if ctx.opts.sign_key else skip("not asked (--sign-key)")


class Image(Step):
    """`hermetic image llvm` of each variant built here: its manifest digest is what both builders sign."""

    name = "image"
    needs = ("build-llvm",)

    def plan(self, ctx: Context) -> Decision:
        only = VARIANT not in (ctx.opts.identity or "")
        return unasked(ctx) or run(f"{ctx.opts.variant} only: --identity has no {VARIANT} for the other trees" if only else "")

    def commands(self, ctx: Context) -> list[list[str]]:
        return [["hermetic", *image_args(ctx, "RECORD", "VARIANT")]]

    def run(self, ctx: Context) -> State:
        shutil.rmtree(ctx.work / "image", ignore_errors=True)  # ours: written by an earlier run
        ctx.report.set("second_builder", {})
        for key in (ctx.opts.sign_key, ctx.opts.gpg_key):
            if key is not None and not key.is_file():
                raise StepFailed(f"no signing key at {key}: carry it (`hermetic key generate` writes one)")
        for variant, record, ref in built(ctx):
            ctx.sh([ctx.python, "-m", "hermetic", *image_args(ctx, record, variant)])
            index = json.loads((image_dir(ctx, variant) / "index.json").read_text())
            digest = index["manifests"][0]["digest"]
            ctx.report.merge("second_builder", {variant: {"identity": ref, "image": {
                "manifest_digest": digest, "layout": str(image_dir(ctx, variant)),
                "name": index["manifests"][0].get("annotations", {}).get("org.opencontainers.image.ref.name")}}})
            ctx.note(f"{variant}: image {digest}, to be signed as {ref}")
        return State.OK


class Sign(Step):
    """Each image signed as its reference (`hermetic sign LAYOUT`), its in-toto links signed with the same key; the
    layout but its layers into OUT/signed/VARIANT, the links into OUT/evidence/VARIANT, the OpenPGP signature into
    the lookaside."""

    name = "sign"
    needs = ("image",)

    def plan(self, ctx: Context) -> Decision:
        return unasked(ctx) or run(f"as {ctx.opts.identity}")

    def commands(self, ctx: Context) -> list[list[str]]:
        ref = identity_for(ctx, ctx.opts.variant) or ""
        return [["hermetic", *sign_args(ctx, "VARIANT", ref)], ["hermetic", *links_args(ctx, "RECORD", "VARIANT")]]

    def run(self, ctx: Context) -> State:
        for d in (ctx.out / "evidence", ctx.out / "signed"):
            shutil.rmtree(d, ignore_errors=True)  # ours: written by an earlier run
        for variant, record, ref in built(ctx):
            ctx.sh([ctx.python, "-m", "hermetic", *sign_args(ctx, variant, ref)])
            ctx.sh([ctx.python, "-m", "hermetic", *links_args(ctx, record, variant)])
            signed = strip_layers(image_dir(ctx, variant), ctx.out / "signed" / variant)
            links = sorted(p.name for p in (ctx.out / "evidence" / variant / "links").glob("*.link"))
            ctx.report.merge("second_builder", {variant: ctx.report.data["second_builder"][variant] | {
                "signed": signed, "links": links}})
        look = ctx.opts.lookaside
        found = sorted(str(p.relative_to(look)) for p in look.rglob("*") if p.is_file()) if look and look.is_dir() else []
        ctx.report.merge("second_builder", {"lookaside": found})
        return State.OK


def strip_layers(layout: Path, dest: Path) -> list[str]:
    """The layout without its image's layers: index, referrers (the signatures, SBOM, provenance) and small blobs."""
    index = json.loads((layout / "index.json").read_text())
    layers = set()
    for m in index["manifests"]:
        manifest = json.loads((layout / "blobs" / "sha256" / m["digest"][7:]).read_text())
        layers |= {d["digest"][7:] for d in manifest.get("layers") or []}
    kept = []
    for path in sorted(p for p in layout.rglob("*") if p.is_file()):
        if path.parent.name == "sha256" and path.name in layers:
            continue
        rel = path.relative_to(layout)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / rel)
        kept.append(rel.as_posix())
    return kept
