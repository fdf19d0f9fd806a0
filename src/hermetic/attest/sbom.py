"""CycloneDX 1.6 SBOMs of LLVM images and compiler wheels, from their build records.

CycloneDX rather than SPDX 2.3 because its model has a place for everything a
hermetic build knows: `formulation` says how the artifact was built (recipe,
variant, resolved options, toolchain, offline enforcement), `pedigree` says
that the pruned source derives from the release archive, hashes are SHA-256
throughout (SPDX 2.3 insists on SHA-1 for files and has no field for a tree
digest), licenses are SPDX expressions all the same, and the official schema
ships on PyPI so tests validate offline.

An SBOM is a pure function of the records and the artifact: no clock, no
paths of the build machine, a serial number derived from the subject digest.
Building the same artifact again gives the same SBOM bytes.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermetic import __version__
from hermetic.attest import licences
from hermetic.core import times

if TYPE_CHECKING:
    from hermetic.model.recipe import Recipe
    from hermetic.model.record import BuildRecord, ToolchainRef

SPEC_VERSION = "1.6"
SCHEMA_URL = "http://cyclonedx.org/schema/bom-1.6.schema.json"
MEDIA_TYPE = "application/vnd.cyclonedx+json"
LLVM_LICENSE = "Apache-2.0 WITH LLVM-exception"
LLVM_WEBSITE = "https://llvm.org"
LLVM_VCS = "https://github.com/llvm/llvm-project"
NANOBIND_LICENSE = "BSD-3-Clause"
PROP = "hermetic:"
# The reproducibility settings every hermetic build step runs under (sandbox.build_env, umask in sandbox.run).
BUILD_ENV = (("LC_ALL", "C"), ("TZ", "UTC"), ("PYTHONHASHSEED", "0"), ("umask", "022"))
_VERSION = re.compile(r"\d+(?:\.\d+)+")
_SERIAL_NS = uuid.UUID("6f1c3b52-6c1e-5d1e-9a52-1f0d3c0b7e11")


@dataclass(frozen=True)
class ImageFacts:
    """What an SBOM and a provenance say about an image; read from its layout."""

    name: str  # the layout's ref name, e.g. llvm-support-19.1.7-linux-amd64
    title: str  # llvm-support-19.1.7
    manifest_digest: str
    manifest_size: int
    media_type: str
    config_digest: str
    layers: tuple[tuple[str, str, int], ...]  # (media type, digest, size)
    arch: str
    os: str
    labels: Mapping[str, str]


def tool_version(line: str) -> str:
    """`cc (Debian 12.2.0-14) 12.2.0` → 12.2.0; `cmake version 4.4.4` → 4.4.4."""
    found = _VERSION.findall(line or "")
    return found[-1] if found else (line or "unknown")


def canonical_uris(recipe: Recipe) -> dict[str, str]:
    """Where each pinned archive of the recipe officially comes from: its URL, or the Debian source package."""
    out: dict[str, str] = {}
    for a in recipe.archives:
        if a.url:
            out[a.file] = a.url
        elif a.apt_source_package:
            version = a.apt_source_version or recipe.version
            out[a.file] = f"pkg:deb/debian/{a.apt_source_package}@{version}?arch=source"
    return out


def origin_uri(origin: str, canonical: str = "") -> str:
    """A URI for where a copy came from: `url:X` → X, `apt:pkg=ver` → a Debian source purl."""
    kind, _, rest = origin.partition(":")
    if kind == "url" and rest:
        return rest
    if kind == "apt" and rest:
        pkg, _, ver = rest.partition("=")
        return f"pkg:deb/debian/{pkg}@{ver}?arch=source" if ver else f"pkg:deb/debian/{pkg}?arch=source"
    return canonical


def _props(pairs: Iterable[tuple[str, Any]]) -> list[dict[str, str]]:
    return [{"name": PROP + k, "value": str(v)} for k, v in pairs if v is not None and v != ""]


def _sha256(hexdigest: str) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": hexdigest.removeprefix("sha256:")}]


def _license(expression: str) -> list[dict[str, str]]:
    return [{"expression": expression}]


def serial_number(subject_digest: str) -> str:
    return f"urn:uuid:{uuid.uuid5(_SERIAL_NS, subject_digest)}"


def _bom(subject: dict[str, Any], subject_digest: str, epoch: int) -> dict[str, Any]:

    return {
        "$schema": SCHEMA_URL,
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": serial_number(subject_digest),
        "version": 1,
        "metadata": {
            # the release date of the pinned source, not the wall clock: the SBOM is reproducible too
            "timestamp": times.iso(epoch),
            "lifecycles": [{"phase": "build"}],
            "tools": {"components": [{"type": "application", "name": "hermetic", "version": __version__}]},
            "component": subject,
        },
        "components": [],
        "dependencies": [],
        "formulation": [],
    }


# -- the LLVM part: install tree, its sources, its recipe and how it was built ------------------------


def _licensed(expression: str, source: str) -> dict[str, Any]:
    """A component's `licenses`, and a property saying where the expression was read."""
    return {"licenses": _license(expression), "properties": _props([("license.source", source)])}


def _with_licence(component: dict[str, Any], found: licences.Found) -> dict[str, Any]:
    extra = _licensed(found.expression, found.source)
    component["licenses"] = extra["licenses"]
    component["properties"] = [*(component.get("properties") or []), *extra["properties"]]
    return component


def _toolchain_components(toolchain: Mapping[str, Any], prefix: str, kind: str = "host") -> list[dict[str, Any]]:
    out = []
    for name in ("cc", "cxx", "cmake", "ninja", "conan", "python"):
        line = str(toolchain.get(name, "") or "")
        if not line:
            continue
        comp = {"type": "application", "bom-ref": f"{prefix}tool:{name}", "name": name,
                "version": tool_version(line), "description": line}
        found = licences.of_compiler(line, kind) if name in ("cc", "cxx") else licences.of_package(name)
        out.append(_with_licence(comp, found))
    return out


def toolchain_package(tc: ToolchainRef) -> tuple[str, str]:
    """The PyPI project and version of a pinned toolchain wheel: `ziglang-0.17.1-py3-…whl` → (ziglang, 0.17.1)."""
    parts = tc.file.split("-")
    return (parts[0] if len(parts) > 1 else tc.name), (tc.version or (parts[1] if len(parts) > 1 else ""))


def toolchain_purl(tc: ToolchainRef) -> str:
    package, version = toolchain_package(tc)
    return f"pkg:pypi/{package}@{version}"


def _pinned_toolchain_component(tc: ToolchainRef, prefix: str) -> dict[str, Any]:
    """The pinned toolchain wheel a build compiled with, as a formulation tool with its sha256."""
    package, version = toolchain_package(tc)
    comp = {
        "type": "application",
        "bom-ref": f"{prefix}toolchain:{package}-{version}",
        "name": package,
        "version": version,
        "description": f"pinned toolchain {tc.name}: {tc.file}",
        "hashes": _sha256(tc.sha256),
        "purl": toolchain_purl(tc),
        "properties": _props(
            [("toolchain", tc.name), ("toolchain.file", tc.file), ("toolchain.target", tc.target),
             ("toolchain.glibc", tc.glibc)]
        ),
    }
    return _with_licence(comp, licences.of_package(package))


def runtime_components(kind: str, compiler_line: str, prefix: str) -> list[dict[str, Any]]:
    """What the compiler links into every binary it makes: its runtime libraries, the C library's start files."""
    return [
        _with_licence(
            {"type": "library", "bom-ref": f"{prefix}runtime:{i}", "name": part["name"],
             "description": f"linked into the binaries by the {kind if kind != 'host' else 'host'} compiler"},
            licences.Found(part["expression"], f"pinned: {part['from']}"),
        )
        for i, part in enumerate(licences.runtime_parts(kind, compiler_line))
    ]


def _toolchain_props(tc: ToolchainRef) -> list[tuple[str, Any]]:
    """A workflow's toolchain properties: `host` plainly, or the pinned toolchain and its target."""
    if tc.kind == "host":
        return [("toolchain", tc.name)]
    return [("toolchain", f"{tc.name} {tc.version}"), ("toolchain.target", tc.target), ("toolchain.glibc", tc.glibc)]


def _source_components(rec: BuildRecord, canonical: Mapping[str, str]) -> list[dict[str, Any]]:
    """The release archives the build was fetched from, with their sha256 and where each came from."""
    out = []
    for s in rec.sources:
        where = origin_uri(s.origin, canonical.get(s.file, ""))
        ext = [{"type": "source-distribution", "url": where}] if where.startswith(("http://", "https://")) else []
        comp: dict[str, Any] = {
            "type": "file",
            "bom-ref": f"source:{s.file}",
            "name": s.file,
            "version": rec.recipe.version,
            "description": f"LLVM {rec.recipe.version} release source archive",
            "hashes": _sha256(s.sha256),
            "licenses": _license(LLVM_LICENSE),
            "externalReferences": [*ext, {"type": "vcs", "url": LLVM_VCS}, {"type": "website", "url": LLVM_WEBSITE}],
            "properties": _props([("origin", s.origin), ("canonical-location", canonical.get(s.file, ""))]),
        }
        if where.startswith("pkg:"):
            comp["purl"] = where
        out.append(comp)
    return out


def _built_source(rec: BuildRecord) -> tuple[list[dict[str, Any]], list[str]]:
    """What the build read: the pruned subset (derived from the release archive), or the archive itself."""
    version, pruned, sources = rec.recipe.version, rec.pruned, rec.sources
    if pruned:
        parent = sources[0] if sources else None
        comp = {
            "type": "file", "bom-ref": "source:pruned", "name": pruned.file, "version": version,
            "description": f"the subset of the LLVM {version} source that variant {rec.variant} builds",
            "hashes": _sha256(pruned.sha256), "licenses": _license(LLVM_LICENSE),
            "pedigree": {
                "ancestors": [{"type": "file", "name": parent.file if parent else "", "version": version,
                               "hashes": _sha256(parent.sha256 if parent else "")}],
                "notes": "deterministic subset: llvm/ without test, unittests, docs, benchmarks, examples, bindings "
                "and the unbuilt lib/Target directories (hermetic source prune)",
            },
            "properties": _props([("prune.key", pruned.key), ("size", pruned.size)]),
        }
        return [comp], ["source:pruned"]
    if sources:
        return [], [f"source:{sources[0].file}"]
    sa = rec.source_archive
    return [{"type": "file", "bom-ref": "source:archive", "name": sa.file, "hashes": _sha256(sa.sha256),
             "licenses": _license(LLVM_LICENSE)}], ["source:archive"]


def _recipe_component(rec: BuildRecord) -> dict[str, Any]:
    comp = {
        "type": "file", "bom-ref": "recipe:llvm", "name": f"hermetic recipe {rec.recipe.name}",
        "version": rec.recipe.version, "description": "Conan 2 recipe, variants and pinned sources (recipes/llvm)",
        "properties": _props([("recipe.digest", rec.recipe.digest), ("recipe.name", rec.recipe.name)]),
    }
    return _with_licence(comp, licences.of_package("hermetic"))


def _tree_component(rec: BuildRecord, ref: str) -> dict[str, Any]:
    files = rec.tree.files
    return {
        "type": "library", "bom-ref": ref, "name": "llvm", "version": rec.recipe.version,
        "description": f"LLVM {rec.recipe.version}, variant {rec.variant}, installed at {rec.prefix}",
        "licenses": _license(LLVM_LICENSE),
        "externalReferences": [{"type": "website", "url": LLVM_WEBSITE}, {"type": "vcs", "url": LLVM_VCS}],
        "properties": _props(
            [
                ("variant", rec.variant),
                *((f"option.{k}", v) for k, v in sorted(dict(rec.options).items())),
                ("prefix", rec.prefix),
                ("tree.digest", rec.tree.digest),
                ("tree.size", rec.tree.size),
                ("tree.entries", len(files) if files else None),
                ("source-date-epoch", rec.source_date_epoch),
                ("inputs.digest", rec.inputs_digest),
            ]
        ),
    }


def _llvm_tools(rec: BuildRecord) -> list[dict[str, Any]]:
    pinned = rec.toolchain_ref
    tools = _toolchain_components(rec.toolchain.as_json() if rec.toolchain else {}, "llvm-", pinned.kind)
    if pinned.kind != "host":
        tools.append(_pinned_toolchain_component(pinned, "llvm-"))
    return tools


def _llvm_workflow(rec: BuildRecord, build_input: list[str], ref: str) -> dict[str, Any]:
    offline, options = rec.offline, dict(rec.options)
    return {
        "bom-ref": "workflow:llvm-build",
        "uid": rec.inputs_digest or f"llvm-{rec.variant}",
        "name": f"hermetic build llvm --variant {rec.variant}",
        "taskTypes": ["build"],
        "inputs": [
            *({"resource": {"ref": r}} for r in [*build_input, "recipe:llvm"]),
            {"parameters": [{"name": "variant", "value": rec.variant}]
             + [{"name": k, "value": str(v)} for k, v in sorted(options.items())]},
            {"environmentVars": [{"name": "SOURCE_DATE_EPOCH", "value": str(rec.source_date_epoch)}]
             + [{"name": k, "value": v} for k, v in BUILD_ENV]},
        ],
        "outputs": [{"type": "artifact", "resource": {"ref": ref}}],
        "properties": _props(
            [
                ("offline.enforced", str(offline.enforced).lower()),
                ("offline.method", offline.method),
                ("offline.reason", offline.reason),
                ("jobs", rec.jobs),
                ("build-commands", rec.build_commands),
                ("machine", rec.toolchain.machine if rec.toolchain else None),
                *_toolchain_props(rec.toolchain_ref),
            ]
        ),
    }


def llvm_part(rec: BuildRecord, canonical: Mapping[str, str], ref: str = "llvm-tree") -> dict[str, Any]:
    """Components, dependencies and formulation of a hermetic LLVM build record."""
    sources = _source_components(rec, canonical)
    derived, build_input = _built_source(rec)
    components = [_tree_component(rec, ref), *sources, *derived, _recipe_component(rec)]
    source_refs = [c["bom-ref"] for c in sources]
    deps = [
        {"ref": ref, "dependsOn": [*build_input, "recipe:llvm"]},
        *({"ref": c["bom-ref"], "dependsOn": []} for c in components if c["bom-ref"] != ref),
    ]
    if derived and derived[0]["bom-ref"] == "source:pruned" and source_refs:
        deps = [d if d["ref"] != "source:pruned" else {"ref": "source:pruned", "dependsOn": source_refs[:1]} for d in deps]
    return {"components": components, "dependencies": deps, "tools": _llvm_tools(rec),
            "workflow": _llvm_workflow(rec, build_input, ref)}


# -- images --------------------------------------------------------------------------------------------


def image_purl(image: ImageFacts) -> str:
    return f"pkg:oci/{image.title}@{image.manifest_digest.replace(':', '%3A')}?arch={image.arch}"


def image_sbom(rec: BuildRecord, image: ImageFacts, canonical: Mapping[str, str]) -> dict[str, Any]:
    """The SBOM of an LLVM image: the image, the install tree in it, and everything it was built from."""
    subject = {
        "type": "container",
        "bom-ref": "image",
        "name": image.title,
        "version": rec.recipe.version,
        "description": f"OCI image of LLVM variant {rec.variant}: {rec.prefix} on FROM scratch",
        "hashes": _sha256(image.manifest_digest),
        "licenses": _license(LLVM_LICENSE),
        "purl": image_purl(image),
        "properties": _props(
            [
                ("image.manifest", image.manifest_digest),
                ("image.config", image.config_digest),
                *((f"image.layer.{i}", f"{d} {mt} {size}") for i, (mt, d, size) in enumerate(image.layers)),
                ("image.platform", f"{image.os}/{image.arch}"),
                ("prefix", rec.prefix),
            ]
        ),
    }
    bom = _bom(subject, image.manifest_digest, rec.source_date_epoch)
    part = llvm_part(rec, canonical)
    bom["components"] = part["components"]
    bom["dependencies"] = [{"ref": "image", "dependsOn": ["llvm-tree"]}, *part["dependencies"]]
    image_flow = {
        "bom-ref": "workflow:image",
        "uid": image.manifest_digest,
        "name": f"hermetic image llvm --variant {rec.variant}",
        "taskTypes": ["build"],
        "inputs": [
            {"resource": {"ref": "llvm-tree"}},
            {"environmentVars": [{"name": "SOURCE_DATE_EPOCH", "value": str(rec.source_date_epoch)}]},
        ],
        "outputs": [{"type": "artifact", "resource": {"ref": "image"}}],
        "properties": _props([("image.layer-tar", "sorted, mtime clamped to SOURCE_DATE_EPOCH, uid/gid 0, no owner names")]),
    }
    bom["formulation"] = [
        {"bom-ref": "formula:llvm-image", "components": part["tools"], "workflows": [part["workflow"], image_flow]}
    ]
    return bom


# -- wheels --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LLVMOrigin:
    """Where the LLVM a wheel links came from when it is not a hermetic build: a distribution package."""

    package: str
    version: str
    arch: str
    source_package: str = ""

    @property
    def purl(self) -> str:
        return f"pkg:deb/debian/{self.package}@{self.version}?arch={self.arch}"


def _unique(components: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for c in components:
        if c["bom-ref"] not in seen:
            seen.add(c["bom-ref"])
            out.append(c)
    return out


def dumps(bom: Mapping[str, Any]) -> bytes:
    """Stable bytes: sorted keys, two-space indent, trailing newline."""
    return json.dumps(bom, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


# -- reading one back ------------------------------------------------------------------------------------


def subject_sha256(bom: Mapping[str, Any]) -> str:
    """The SHA-256 the SBOM gives its subject (metadata.component), or ''."""
    comp = (bom.get("metadata") or {}).get("component") or {}
    for h in comp.get("hashes") or []:
        if h.get("alg") == "SHA-256":
            return str(h.get("content", ""))
    return ""


def property_of(component: Mapping[str, Any], name: str) -> str:
    for p in component.get("properties") or []:
        if p.get("name") == PROP + name:
            return str(p.get("value", ""))
    return ""


def find_component(bom: Mapping[str, Any], ref: str) -> dict[str, Any]:
    for c in bom.get("components") or []:
        if c.get("bom-ref") == ref:
            return dict(c)
    return {}
