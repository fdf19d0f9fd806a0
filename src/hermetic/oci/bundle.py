"""The bundle format: every input of a plan as one OCI artifact (written, opened, fed into a cache).

The artifact is an OCI image layout holding one manifest (artifactType
application/vnd.hermetic.bundle.v1): its config is the bundle's index (every
entry's role, name, place in the cache, sha256, size), its layers are the
entries themselves. `feed` checks every blob, unpacks the checkout data and
admits each entry into a fresh cache at the very path the caches look, each by
its sha256. What goes into a bundle is plan/bundle.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError
from hermetic.fetch import cache
from hermetic.model import recipe
from hermetic.model.artifacts import BUNDLE_ARTIFACT_TYPE, Kind, is_bundle_manifest, layout_kind
from hermetic.oci.layout import Layout
from hermetic.oci.types import MT_MANIFEST, REF_NAME, Descriptor, canonical_json, sha256_digest

if TYPE_CHECKING:
    from hermetic.core.log import Log

ARTIFACT_TYPE = BUNDLE_ARTIFACT_TYPE
MT_INDEX = "application/vnd.hermetic.bundle.index.v1+json"
MT_FILE = "application/vnd.hermetic.bundle.file.v1"
MT_ROOT = "application/vnd.hermetic.bundle.root.v1.tar"
ANN_TITLE = "org.opencontainers.image.title"
ROOT_PARTS = ("recipes", "toolchain", "src/compiler")  # the checkout's data a build reads


@dataclass(frozen=True)
class Entry:
    """One input: what it is (role), its file name, where the caches look for it (relative to the cache)."""

    role: str  # root | plan | pruned | pruned-meta | toolchain | wheelhouse | sdist | release
    name: str
    cache_path: str  # "" for the root and the plan
    sha256: str
    size: int


@dataclass(frozen=True)
class RecipeRef:
    """The LLVM recipe a bundle builds: its directory in the checkout data, release and digest."""

    path: str  # relative to the checkout: recipes/llvm
    version: str
    digest: str


def write(out_dir: Path, name: str, files: Sequence[tuple[Entry, Path]], root: bytes, plan: dict[str, Any],
          llvm: RecipeRef) -> Descriptor:
    """The bundle as an OCI layout at out_dir (written beside it, then moved into place)."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise UsageError(f"{out_dir} exists and is not empty", "a bundle is written into a new directory", "")
    tmp = out_dir.with_name(f".{out_dir.name}.partial{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    layout = Layout(tmp)
    layout.init()
    plan_bytes = json.dumps(plan, indent=1, sort_keys=True).encode() + b"\n"
    entries = [Entry("root", "root.tar", "", sha256_digest(root)[7:], len(root)),
               Entry("plan", "plan.json", "", sha256_digest(plan_bytes)[7:], len(plan_bytes)), *(e for e, _ in files)]
    layout.put_bytes(root)
    layout.put_bytes(plan_bytes)
    for e, path in files:
        dest = layout.blob_path("sha256:" + e.sha256)
        if not dest.exists():
            shutil.copyfile(path, dest)
        if file_sha256(dest) != e.sha256:
            raise VerifyError(f"{path} changed while it was bundled", "", "bundle again")
    index = {"schema": "hermetic.bundle/1", "name": name, "recipe_digest": llvm.digest, "llvm_recipe": llvm.path,
             "llvm_version": llvm.version, "entries": [asdict(e) for e in entries]}
    config = canonical_json(index)
    layers = [{"mediaType": MT_ROOT if e.role == "root" else MT_FILE, "digest": "sha256:" + e.sha256, "size": e.size,
               "annotations": {ANN_TITLE: f"{e.role}/{e.name}"}} for e in entries]
    manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "artifactType": ARTIFACT_TYPE,
                "config": {"mediaType": MT_INDEX, "digest": layout.put_bytes(config), "size": len(config)},
                "layers": layers, "annotations": {ANN_TITLE: name}}
    body = canonical_json(manifest)
    desc = Descriptor(MT_MANIFEST, layout.put_bytes(body), len(body), annotations={REF_NAME: name})
    layout.write_index([desc])
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if out_dir.exists():
        out_dir.rmdir()
    os.replace(tmp, out_dir)
    return desc


@dataclass(frozen=True)
class Opened:
    layout: Layout
    manifest: Descriptor
    name: str
    recipe_digest: str
    entries: tuple[Entry, ...]
    llvm_recipe: str = "recipes/llvm"
    llvm_version: str = ""


def open_layout(path: Path) -> Opened:
    """A bundle layout, every blob checked against its digest, its index read."""
    layout = Layout(path)
    roots = [d for d in layout.index() if d.media_type == MT_MANIFEST]
    if len(roots) != 1:
        raise UsageError(f"{path} is not a hermetic bundle", f"it has {len(roots)} manifests", "pass a bundle layout")
    layout.verify(roots[0])
    manifest = layout.read_json(roots[0])
    if not is_bundle_manifest(manifest):
        raise UsageError(f"{path} is not a hermetic bundle", f"its artifactType is {manifest.get('artifactType')!r}",
                         "pass a layout written by `hermetic bundle`")
    index = layout.read_json(Descriptor.from_json(manifest["config"], roots[0].digest))
    try:
        entries = tuple(Entry(**e) for e in index["entries"])
    except (KeyError, TypeError) as exc:
        raise VerifyError(f"the index of {path} is malformed", str(exc), "bundle again") from exc
    listed = {d["digest"] for d in manifest.get("layers") or []}
    missing = [e.name for e in entries if "sha256:" + e.sha256 not in listed]
    if missing:
        raise VerifyError(f"the index of {path} names files the bundle lacks", ", ".join(missing), "bundle again")
    recipe_dir = str(index.get("llvm_recipe") or "recipes/llvm")
    if _unsafe(recipe_dir):
        raise VerifyError(f"the index of {path} names a recipe outside its data", recipe_dir, "bundle again")
    return Opened(layout, roots[0], str(index.get("name", "")), str(index.get("recipe_digest", "")), entries,
                  recipe_dir, str(index.get("llvm_version") or ""))


def is_bundle(layout: Layout) -> bool:
    """Told as every command tells it (model/artifacts.py); the blobs are checked by whoever reads them."""
    return layout_kind(layout.path) is Kind.BUNDLE


def _unsafe(rel: str) -> bool:
    return rel.startswith("/") or ".." in Path(rel).parts or not rel


def feed(opened: Opened, root_dir: Path, cache_dir: Path, log: Log) -> None:
    """Unpack the checkout data into root_dir and admit every cached entry into cache_dir by its sha256."""
    for e in opened.entries:
        blob = opened.layout.blob_path("sha256:" + e.sha256)
        if e.role == "root":
            _unpack_root(blob, root_dir, (*ROOT_PARTS, opened.llvm_recipe))
        elif e.cache_path:
            if _unsafe(e.cache_path):
                raise VerifyError(f"bundle entry {e.name} would land outside the cache", e.cache_path, "")
            dest = cache_dir / e.cache_path
            if not (dest.is_file() and file_sha256(dest) == e.sha256):
                cache.admit_file(dest, e.sha256, blob, f"bundle:{opened.manifest.digest}", f"{e.role} {e.name}")
    got = recipe.load_at(root_dir / opened.llvm_recipe, opened.llvm_version or None, root_dir).digest()
    if got != opened.recipe_digest:
        raise VerifyError("the bundle's recipe is not the one it names", f"{got} unpacked, {opened.recipe_digest} listed",
                          "the bundle is damaged; bundle again")
    log(f"bundle: {len(opened.entries)} inputs of {opened.name} ({opened.manifest.digest[:19]}…) fed into {cache_dir}")


def _unpack_root(blob: Path, root_dir: Path, parts: Sequence[str]) -> None:
    root_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(blob) as tar:
        for m in tar.getmembers():
            if not m.isfile() or _unsafe(m.name) or not m.name.startswith(tuple(p + "/" for p in parts)):
                raise VerifyError("the bundle's checkout data holds an unexpected entry", m.name, "bundle again")
        tar.extractall(root_dir, filter="data")


def summary(opened: Opened) -> Iterable[str]:
    for e in opened.entries:
        yield f"{e.role:<12} {e.name:<70} {e.size / 1e6:8.1f} MB  sha256:{e.sha256[:16]}…"
