"""The runner as a second builder: the variant's image written, signed as its reference, and its in-toto links."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .core import Context, Decision, State, Step, StepFailed, run, skip

# what device.sh's collect brings back of the signed image: all but its layers (the other builder has those bytes)
SIGNED_DIR = "signed"


def image_dir(ctx: Context) -> Path:
    return ctx.work / "image"


def image_args(ctx: Context, record: Path | str) -> list[str]:
    """The image with its SBOM and provenance, their DSSE envelopes signed with the key (the image's digest is the
    same without them: they are referrers beside it)."""
    return ["image", "llvm", "--record", str(record), "--output", str(image_dir(ctx)), "--work-dir",
            str(ctx.work / "hermetic"), "--sign-key", str(ctx.opts.sign_key), "--quiet"]


class Image(Step):
    """`hermetic image llvm` of the variant built here: its manifest digest is what both builders sign."""

    name = "image"
    needs = ("build-llvm",)

    def plan(self, ctx: Context) -> Decision:
        return run() if ctx.opts.sign_key else skip("not asked (--sign-key)")

    def commands(self, ctx: Context) -> list[list[str]]:
        return [["hermetic", *image_args(ctx, "RECORD")]]

    def run(self, ctx: Context) -> State:
        shutil.rmtree(image_dir(ctx), ignore_errors=True)  # ours: written by an earlier run
        ctx.sh([ctx.python, "-m", "hermetic", *image_args(ctx, ctx.record_paths["build-llvm"])])
        index = json.loads((image_dir(ctx) / "index.json").read_text())
        digest = index["manifests"][0]["digest"]
        ctx.report.set("second_builder", {"image": {"manifest_digest": digest, "layout": str(image_dir(ctx)),
                                                    "name": index["manifests"][0].get("annotations", {}).get(
                                                        "org.opencontainers.image.ref.name")}})
        ctx.note(f"image {digest}")
        return State.OK


def sign_args(ctx: Context) -> list[str]:
    o = ctx.opts
    return ["sign", str(image_dir(ctx)), "--identity", str(o.identity), "--sign-key", str(o.sign_key),
            *(["--gpg-key", str(o.gpg_key), "--lookaside", str(o.lookaside)] if o.gpg_key else [])]


def links_args(ctx: Context, record: Path | str) -> list[str]:
    o = ctx.opts
    return ["intoto", "links", str(ctx.out / "evidence"), "--record", str(record), "--image", str(image_dir(ctx)),
            *(["--wheel", str(ctx.wheel)] if ctx.wheel else []),
            *(["--llvm-recipe", o.llvm_recipe] if o.llvm_recipe else []), "--links-only", "--sign-key", str(o.sign_key)]


class Sign(Step):
    """The image signed as --identity (`hermetic sign LAYOUT`), its in-toto links signed with the same key; the layout
    but its layers into OUT/signed, the links into OUT/evidence, the OpenPGP signature into the lookaside."""

    name = "sign"
    needs = ("image",)

    def plan(self, ctx: Context) -> Decision:
        return run(f"as {ctx.opts.identity}") if ctx.opts.sign_key else skip("not asked (--sign-key)")

    def commands(self, ctx: Context) -> list[list[str]]:
        return [["hermetic", *sign_args(ctx)], ["hermetic", *links_args(ctx, "RECORD")]]

    def run(self, ctx: Context) -> State:
        for key in (ctx.opts.sign_key, ctx.opts.gpg_key):
            if key is not None and not key.is_file():
                raise StepFailed(f"no signing key at {key}: carry it (`hermetic key generate` writes one)")
        ctx.sh([ctx.python, "-m", "hermetic", *sign_args(ctx)])
        evidence = ctx.out / "evidence"
        shutil.rmtree(evidence, ignore_errors=True)  # ours: written by an earlier run
        ctx.sh([ctx.python, "-m", "hermetic", *links_args(ctx, ctx.record_paths["build-llvm"])])
        signed = strip_layers(image_dir(ctx), ctx.out / SIGNED_DIR)
        lookaside = sorted(str(p.relative_to(ctx.opts.lookaside)) for p in ctx.opts.lookaside.rglob("*")
                           if p.is_file()) if ctx.opts.lookaside and ctx.opts.lookaside.is_dir() else []
        ctx.report.merge("second_builder", {
            "identity": ctx.opts.identity, "signed": signed, "lookaside": lookaside,
            "links": sorted(p.name for p in (evidence / "links").glob("*.link"))})
        return State.OK


def strip_layers(layout: Path, dest: Path) -> list[str]:
    """The layout without its image's layers: index, referrers (the signatures, SBOM, provenance) and small blobs."""
    shutil.rmtree(dest, ignore_errors=True)  # ours: written by an earlier run
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
