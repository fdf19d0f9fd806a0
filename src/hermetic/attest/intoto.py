"""in-toto evidence of a build: signed links for each step, a layout, and the products for `in-toto-verify`.

The supply chain is fetch -> prune -> build -> image (-> wheel). Each step's
link names its materials and products by sha256 under one virtual tree that
every builder shares (no machine paths): `sources/<archive>`,
`recipes/llvm/...`, `toolchain/<wheel>`, the install tree at its prefix
(`usr/lib64/llvm-...`), `image/...` (the final OCI layout with its
attestations), `dist/<wheel>`. Hashes are taken from the files themselves
where they are on this machine (the tree, the layout, the recipe) and from the
record where only a verified cache held them (the release archive, the pruned
archive, the toolchain wheel; each admitted there by that sha256).

The layout gives every step a threshold of functionaries (k of n builders,
each rebuilding to the same artifacts) and one inspection, run by the
verifier: unpack the image's layers and match the files against the build
step's products, and the image and wheel against their steps' products. So
`in-toto-verify` rejects a changed byte in the tree (the image no longer
unpacks to what was built), a replaced SBOM (the layout's files differ from the
image step's products), and a link signed by any key the layout does not name.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from securesystemslib.formats import encode_canonical

from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError
from hermetic.model import recipe, record
from hermetic.oci import referrers
from hermetic.oci.layout import Layout
from hermetic.oci.types import INDEX_TYPES, MANIFEST_TYPES

if TYPE_CHECKING:
    from hermetic.attest.signing import SigningKey, VerifyKey

Artifacts = dict[str, dict[str, str]]
STEPS = ("fetch", "prune", "build", "image", "wheel", "attest")
INSPECTION = "unpack-image"
LAYOUT_FILE = "root.layout"
LINK_DIR = "links"
# Run by in-toto-verify in the evidence directory: every layer of the image, unpacked under unpacked/.
UNPACK = (
    "import json,pathlib,shutil,tarfile\n"
    "b=pathlib.Path('image/blobs/sha256')\n"
    "blob=lambda d:b/d['digest'].split(':')[1]\n"
    "i=json.loads(pathlib.Path('image/index.json').read_text())\n"
    "shutil.rmtree('unpacked',ignore_errors=True)\n"
    "todo=list(i['manifests'])\n"
    "while todo:\n"
    " m=json.loads(blob(todo.pop()).read_text())\n"
    " todo+=m.get('manifests',[])\n"
    " for l in m.get('layers',[]):\n"
    "  with tarfile.open(blob(l)) as t:t.extractall('unpacked',filter='data')\n"
)


def _hashes(root: Path, under: str) -> Artifacts:
    """Every regular file below root, as `under/relative/path` -> sha256."""
    out: Artifacts = {}
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[f"{under}/{p.relative_to(root).as_posix()}".lstrip("/")] = {"sha256": file_sha256(p)}
    return out


def tree_artifacts(rec: record.BuildRecord) -> Artifacts:
    """The install tree's files at their prefix, hashed on disk; refused when the tree no longer matches its record."""
    root = Path(rec.install_root)
    if not root.is_dir() or record.tree_digest(record.scan_tree(root)) != rec.tree.digest:
        raise VerifyError(
            f"the install tree at {root} is not the one its record describes",
            f"the record says {rec.tree.digest}", "build it again; evidence is written from the very tree that was built",
        )
    # the install root is the image's root: its entries already begin with the prefix (usr/lib64/llvm-...)
    return {e.path: {"sha256": e.sha256} for e in record.scan_tree(root) if e.kind == "file"}


def recipe_artifacts(recipe_dir: Path, root: Path, rec: record.BuildRecord) -> Artifacts:
    """The recipe's files, as recipes/<name>/...; refused unless they are the recipe the tree was built with."""
    here = recipe.load_at(recipe_dir, rec.recipe.version, root)
    if here.digest() != rec.recipe.digest:
        raise VerifyError("the recipe in this checkout is not the one the tree was built with",
                          f"recipe digest {here.digest()} here, {rec.recipe.digest} recorded",
                          "write the evidence from the checkout the build ran in")
    return {k: v for k, v in _hashes(recipe_dir, f"recipes/{rec.recipe.name}").items() if "__pycache__" not in k}


def image_files(image_dir: Path) -> dict[str, Path]:
    """The image alone (oci-layout, index.json, every blob the index reaches), not its attestations."""
    layout = Layout(image_dir)
    layout.verify()
    out = {"oci-layout": image_dir / "oci-layout", "index.json": image_dir / "index.json"}
    todo = list(layout.index())
    while todo:
        d = todo.pop()
        out[f"blobs/sha256/{d.digest.split(':')[1]}"] = layout.blob_path(d.digest)
        if d.media_type in INDEX_TYPES + MANIFEST_TYPES:
            todo += layout.children(d)
    return dict(sorted(out.items()))


def attestation_files(image_dir: Path, wheel: Path | None) -> dict[str, Path]:
    """What each builder says about the products (SBOM, provenance, record, their envelopes), by file name."""
    out: dict[str, Path] = {}
    for r in referrers.referrers(Layout(image_dir)):
        if r.kind and r.kind != referrers.KIND_SIGNATURE:
            title = str(((r.manifest.get("layers") or [{}])[0].get("annotations") or {}).get(referrers.ANN_TITLE, r.kind))
            out[f"image-{r.subject.split(':')[1][:12]}-{Path(title).name}"] = r.payload
    if wheel is not None:
        out |= {p.name: p for p in sorted(wheel.parent.glob(wheel.name + ".*")) if p.is_file()}
    return dict(sorted(out.items()))


def _of(files: Mapping[str, Path], under: str) -> Artifacts:
    return {f"{under}/{name}": {"sha256": file_sha256(p)} for name, p in files.items()}


def evidence(
    recipe_dir: Path, root: Path, rec: record.BuildRecord, image_dir: Path,
    wheel: tuple[record.WheelRecord, Path] | None = None,
) -> dict[str, tuple[Artifacts, Artifacts]]:
    """Materials and products of each step, by virtual path."""
    if not rec.sources:
        raise UsageError("the record names no release archive", "it was built from a local --source",
                         "in-toto evidence starts at the pinned release archive: build from it")
    release = {f"sources/{s.file}": {"sha256": s.sha256} for s in rec.sources[:1]}
    recipe_files = recipe_artifacts(recipe_dir, root, rec)
    pins = {k: v for k, v in recipe_files.items() if k.endswith("/conandata.yml")}
    pruned = {f"sources/{rec.pruned.file}": {"sha256": rec.pruned.sha256}} if rec.pruned else release
    tc = rec.toolchain_ref
    chain = {} if tc.kind == "host" else {f"toolchain/{tc.file}": {"sha256": tc.sha256}}
    tree = tree_artifacts(rec)
    image = _of(image_files(image_dir), "image")
    steps = {
        "fetch": (pins, release),
        "prune": (release, pruned),
        "build": ({**pruned, **recipe_files, **chain}, tree),
        "image": (tree, image),
    }
    products = dict(image)
    if wheel is not None:
        steps["wheel"] = wheel_evidence(wheel[0], wheel[1], tree)
        products |= steps["wheel"][1]
    steps["attest"] = (products, _of(attestation_files(image_dir, wheel[1] if wheel else None), "attestations"))
    return steps


def wheel_evidence(wrec: record.WheelRecord, wheel: Path, tree: Artifacts) -> tuple[Artifacts, Artifacts]:
    if file_sha256(wheel) != wrec.sha256:
        raise VerifyError(f"{wheel.name} does not match its record", "", "write the evidence of the wheel that was built")
    # the very file the build installed, where the recorded wheelhouse still holds it; else the first pin
    here = {file_sha256(f) for f in Path(wrec.wheelhouse).glob("*.whl")} if wrec.wheelhouse else set()
    reqs = {f"wheelhouse/{p.name}-{p.version}": {"sha256": next((h for h in p.sha256 if h in here), p.sha256[0])}
            for p in wrec.build_requirements.pinned if p.sha256}
    sd = wrec.project.sdist
    sdist = {f"sdist/{sd.file}": {"sha256": sd.sha256}} if sd is not None else {}
    return {**tree, **reqs, **sdist}, {f"dist/{wheel.name}": {"sha256": wrec.sha256}}


# -- links and the layout ------------------------------------------------------------------------------------


def link(name: str, materials: Artifacts, products: Artifacts) -> dict[str, Any]:
    return {"_type": "link", "name": name, "materials": dict(sorted(materials.items())),
            "products": dict(sorted(products.items())), "byproducts": {}, "command": [], "environment": {}}


def metablock(signed: dict[str, Any], keys: Sequence[SigningKey]) -> dict[str, Any]:
    """Signed as in-toto signs: over the canonical JSON of `signed` (securesystemslib's encoding)."""
    data = str(encode_canonical(signed)).encode()
    return {"signatures": [k.signer.sign(data).to_dict() for k in keys], "signed": signed}


def link_name(step: str, key: VerifyKey) -> str:
    return f"{step}.{key.keyid[:8]}.link"


def _write(path: Path, doc: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def write_links(out: Path, key: SigningKey, steps: Mapping[str, tuple[Artifacts, Artifacts]]) -> list[Path]:
    return [_write(out / LINK_DIR / link_name(name, key.public), metablock(link(name, m, p), [key]))
            for name, (m, p) in steps.items()]


def stage_products(out: Path, image_dir: Path, wheel: Path | None) -> None:
    """The final products where the inspection looks: image/ (the image alone), dist/ (the wheel), attestations/."""
    for sub in ("image", "dist", "attestations"):
        if (out / sub).exists():
            raise UsageError(f"{out / sub} exists", "evidence goes into a new directory", "pass a new DIR")
    parts = [("image", image_files(image_dir)), ("attestations", attestation_files(image_dir, wheel))]
    if wheel is not None:
        parts.append(("dist", {wheel.name: wheel}))
    for sub, files in parts:
        for name, src in files.items():
            (out / sub / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out / sub / name)


def _step(name: str, keys: Sequence[VerifyKey], threshold: int, materials: list[list[str]],
          products: list[list[str]]) -> dict[str, Any]:
    return {"_type": "step", "name": name, "threshold": threshold, "pubkeys": [k.keyid for k in keys],
            "expected_command": [], "expected_materials": materials, "expected_products": products}


def _from(pattern: str, step: str, where: str = "") -> list[str]:
    return ["MATCH", pattern, *(["IN", where] if where else []), "WITH", "PRODUCTS", "FROM", step]


def layout(builders: Sequence[VerifyKey], threshold: int, expires: _dt.datetime, with_wheel: bool) -> dict[str, Any]:
    """The supply chain as in-toto sees it: who may perform each step (k of n), what flows between the steps."""
    if not 1 <= threshold <= len(builders):
        raise UsageError(f"threshold {threshold} with {len(builders)} builder key(s)", "", "give 1..number of builders")
    no = ["DISALLOW", "*"]
    steps = [
        _step("fetch", builders, threshold, [["ALLOW", "recipes/*/conandata.yml"], no], [["CREATE", "sources/*"], no]),
        _step("prune", builders, threshold, [_from("sources/*", "fetch"), no], [["ALLOW", "sources/*"], no]),
        _step("build", builders, threshold,
              [_from("sources/*", "prune"), ["ALLOW", "recipes/*"], ["ALLOW", "toolchain/*"], no],
              [["CREATE", "usr/*"], no]),
        _step("image", builders, threshold, [_from("usr/*", "build"), no], [["CREATE", "image/*"], no]),
    ]
    finals = [_from("image/*", "image")]
    if with_wheel:
        steps.append(_step("wheel", builders, threshold,
                           [_from("usr/*", "build"), ["ALLOW", "wheelhouse/*"], ["ALLOW", "sdist/*"], no],
                           [["CREATE", "dist/*"], no]))
        finals.append(_from("dist/*", "wheel"))
    # Attestations carry each builder's own times and machine: one builder's suffice, about the agreed products.
    steps.append(_step("attest", builders, 1, [*finals, no], [["CREATE", "attestations/*"], no]))
    finals.append(_from("attestations/*", "attest"))
    evidence = [["ALLOW", LAYOUT_FILE], ["ALLOW", f"{LINK_DIR}/*"]]
    inspection = {
        "_type": "inspection", "name": INSPECTION, "run": ["python3", "-c", UNPACK],
        "expected_materials": [*finals, *evidence, ["ALLOW", "unpacked/*"], no],
        "expected_products": [_from("*", "build", "unpacked"), *finals, *evidence, no],
    }
    return {
        "_type": "layout",
        "expires": expires.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "readme": "hermetic: fetch -> prune -> build -> image" + (" -> wheel" if with_wheel else ""),
        "keys": {k.keyid: {**k.sslib.to_dict(), "keyid": k.keyid} for k in builders},
        "steps": steps,
        "inspect": [inspection],
    }


def write_layout(out: Path, owner: SigningKey, doc: dict[str, Any]) -> Path:
    return _write(out / LAYOUT_FILE, metablock(doc, [owner]))
