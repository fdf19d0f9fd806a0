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

The format itself, and what the provenance shares of it, is cyclonedx.py's, which reads no record;
this module adds what the records (model.record) say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermetic.attest import licences

# the format, which the provenance shares; the names its users (and the SBOM's readers) know from here too
from hermetic.attest.cyclonedx import MEDIA_TYPE as MEDIA_TYPE
from hermetic.attest.cyclonedx import PROP as PROP
from hermetic.attest.cyclonedx import SCHEMA_URL as SCHEMA_URL
from hermetic.attest.cyclonedx import SPEC_VERSION as SPEC_VERSION
from hermetic.attest.cyclonedx import ImageFacts as ImageFacts
from hermetic.attest.cyclonedx import dumps as dumps
from hermetic.attest.cyclonedx import find_component as find_component
from hermetic.attest.cyclonedx import (
    license_of,
    new_bom,
    props,
    runtime_components,
    sha256_hash,
    toolchain_components,
    toolchain_package,
    toolchain_purl,
    unique_components,
    with_licence,
)
from hermetic.attest.cyclonedx import origin_uri as origin_uri
from hermetic.attest.cyclonedx import property_of as property_of
from hermetic.attest.cyclonedx import subject_sha256 as subject_sha256
from hermetic.attest.cyclonedx import tool_version as tool_version

if TYPE_CHECKING:
    from hermetic.model.recipe import Recipe
    from hermetic.model.record import BuildRecord, PinnedRequirement, ToolchainRef, ToolchainVersions, WheelRecord

LLVM_LICENSE = "Apache-2.0 WITH LLVM-exception"
LLVM_WEBSITE = "https://llvm.org"
LLVM_VCS = "https://github.com/llvm/llvm-project"
NANOBIND_LICENSE = "BSD-3-Clause"
# The reproducibility settings every hermetic build step runs under (sandbox.build_env, umask in sandbox.run).
BUILD_ENV = (("LC_ALL", "C"), ("TZ", "UTC"), ("PYTHONHASHSEED", "0"), ("umask", "022"))


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


# -- the LLVM part: install tree, its sources, its recipe and how it was built ------------------------


def _pinned_toolchain_component(tc: ToolchainRef, prefix: str) -> dict[str, Any]:
    """The pinned toolchain wheel a build compiled with, as a formulation tool with its sha256."""
    package, version = toolchain_package(tc)
    comp = {
        "type": "application",
        "bom-ref": f"{prefix}toolchain:{package}-{version}",
        "name": package,
        "version": version,
        "description": f"pinned toolchain {tc.name}: {tc.file}",
        "hashes": sha256_hash(tc.sha256),
        "purl": toolchain_purl(tc),
        "properties": props(
            [("toolchain", tc.name), ("toolchain.file", tc.file), ("toolchain.target", tc.target),
             ("toolchain.glibc", tc.glibc)]
        ),
    }
    return with_licence(comp, licences.of_package(package))


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
            "hashes": sha256_hash(s.sha256),
            "licenses": license_of(LLVM_LICENSE),
            "externalReferences": [*ext, {"type": "vcs", "url": LLVM_VCS}, {"type": "website", "url": LLVM_WEBSITE}],
            "properties": props([("origin", s.origin), ("canonical-location", canonical.get(s.file, ""))]),
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
            "hashes": sha256_hash(pruned.sha256), "licenses": license_of(LLVM_LICENSE),
            "pedigree": {
                "ancestors": [{"type": "file", "name": parent.file if parent else "", "version": version,
                               "hashes": sha256_hash(parent.sha256 if parent else "")}],
                "notes": "deterministic subset: llvm/ without test, unittests, docs, benchmarks, examples, bindings "
                "and the unbuilt lib/Target directories (hermetic source prune)",
            },
            "properties": props([("prune.key", pruned.key), ("size", pruned.size)]),
        }
        return [comp], ["source:pruned"]
    if sources:
        return [], [f"source:{sources[0].file}"]
    sa = rec.source_archive
    return [{"type": "file", "bom-ref": "source:archive", "name": sa.file, "hashes": sha256_hash(sa.sha256),
             "licenses": license_of(LLVM_LICENSE)}], ["source:archive"]


def _recipe_component(rec: BuildRecord) -> dict[str, Any]:
    comp = {
        "type": "file", "bom-ref": "recipe:llvm", "name": f"hermetic recipe {rec.recipe.name}",
        "version": rec.recipe.version, "description": "Conan 2 recipe, variants and pinned sources (recipes/llvm)",
        "properties": props([("recipe.digest", rec.recipe.digest), ("recipe.name", rec.recipe.name)]),
    }
    return with_licence(comp, licences.of_package("hermetic"))


def _tree_component(rec: BuildRecord, ref: str) -> dict[str, Any]:
    files = rec.tree.files
    return {
        "type": "library", "bom-ref": ref, "name": "llvm", "version": rec.recipe.version,
        "description": f"LLVM {rec.recipe.version}, variant {rec.variant}, installed at {rec.prefix}",
        "licenses": license_of(LLVM_LICENSE),
        "externalReferences": [{"type": "website", "url": LLVM_WEBSITE}, {"type": "vcs", "url": LLVM_VCS}],
        "properties": props(
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
    tools = toolchain_components(rec.toolchain.as_json() if rec.toolchain else {}, "llvm-", pinned.kind)
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
        "properties": props(
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
        "hashes": sha256_hash(image.manifest_digest),
        "licenses": license_of(LLVM_LICENSE),
        "purl": image_purl(image),
        "properties": props(
            [
                ("image.manifest", image.manifest_digest),
                ("image.config", image.config_digest),
                *((f"image.layer.{i}", f"{d} {mt} {size}") for i, (mt, d, size) in enumerate(image.layers)),
                ("image.platform", f"{image.os}/{image.arch}"),
                ("prefix", rec.prefix),
            ]
        ),
    }
    bom = new_bom(subject, image.manifest_digest, rec.source_date_epoch)
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
        "properties": props([("image.layer-tar", "sorted, mtime clamped to SOURCE_DATE_EPOCH, uid/gid 0, no owner names")]),
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


# The wheel, what is linked into it (the LLVM, nanobind, the compiler's runtime parts), and how it was
# built (the hash-pinned build requirements, the interpreter, the compilers, the pinned toolchain, a
# third-party recipe's sdist), each with its SPDX licence and where that was read.

LIBRARIES = ("nanobind", "scikit-build-core", "packaging", "pathspec")


def _subject(wrec: WheelRecord, license_expression: str) -> dict[str, Any]:
    name = wrec.wheel
    parts = name.removesuffix(".whl").split("-")
    dist, version = (parts[0], parts[1]) if len(parts) >= 2 else (name, "")
    sd, llvm = wrec.project.sdist, wrec.llvm
    found = (licences.Found(license_expression, "the wheel's METADATA") if licences.is_valid(license_expression)
             else licences.of_package(dist))
    subject = {
        "type": "library",
        "bom-ref": "wheel",
        "name": dist,
        "version": version,
        "description": f"{name}: built from its release sdist {sd.file} against LLVM {llvm.version}"
        if sd else f"{name}: the compiler core built against LLVM {llvm.version}",
        "hashes": sha256_hash(wrec.sha256),
        "purl": f"pkg:pypi/{dist.replace('_', '-')}@{version}?file_name={name}",
        "properties": props([("wheel.file", name), ("wheel.tag", wrec.tag), ("wheel.size", wrec.size),
                              ("glibc-required", wrec.glibc_required), ("platform-tag.from", wrec.platform_tag.source)]),
    }
    if sd is not None:
        subject["externalReferences"] = [{"type": "source-distribution", "url": sd.url or f"file:{sd.file}",
                                          "hashes": sha256_hash(sd.sha256)}]
    return with_licence(subject, found)


def _foreign_llvm(wrec: WheelRecord, origin: LLVMOrigin | None, ref: str) -> dict[str, Any]:
    """The LLVM a wheel links when it is not a hermetic build: a prefix, maybe a distribution package."""
    llvm = wrec.llvm
    comp: dict[str, Any] = {
        "type": "library", "bom-ref": ref, "name": "llvm", "version": llvm.version,
        "description": f"LLVM {llvm.version} at {llvm.prefix}, linked statically",
        "licenses": license_of(LLVM_LICENSE),
        "externalReferences": [{"type": "website", "url": LLVM_WEBSITE}, {"type": "vcs", "url": LLVM_VCS}],
        "properties": props([("prefix", llvm.prefix), ("built-by", "not hermetic: no build record")]),
    }
    if origin is not None:
        comp["purl"] = origin.purl
        comp["properties"] += props([("package", f"{origin.package} {origin.version}"),
                                      ("source-package", origin.source_package)])
    return comp


def _nanobind(nb: PinnedRequirement, metadata: Mapping[str, str]) -> dict[str, Any]:
    comp = {
        "type": "library", "bom-ref": "nanobind", "name": "nanobind", "version": nb.version,
        "description": "compiled into the extension module (static)",
        "purl": f"pkg:pypi/nanobind@{nb.version}",
        "hashes": [{"alg": "SHA-256", "content": h} for h in nb.sha256],
    }
    return with_licence(comp, licences.of_package("nanobind", metadata))


def _requirement_tools(pinned: Mapping[str, PinnedRequirement], metadata: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every hash-pinned wheelhouse entry the build ran, with the licence its own METADATA states."""
    return [
        with_licence(
            {"type": "library" if name in LIBRARIES else "application", "bom-ref": f"wheel-tool:{name}",
             "name": name, "version": p.version, "purl": f"pkg:pypi/{name}@{p.version}",
             "hashes": [{"alg": "SHA-256", "content": h} for h in p.sha256]},
            licences.of_package(name, metadata),
        )
        for name, p in sorted(pinned.items())
    ]


def _sdist_tool(wrec: WheelRecord, metadata: Mapping[str, str]) -> list[dict[str, Any]]:
    """What a third-party recipe built: the release source, admitted to the cache only by this digest."""
    sd = wrec.project.sdist
    if sd is None:
        return []
    comp = {
        "type": "file", "bom-ref": "sdist", "name": sd.file, "version": sd.version,
        "description": f"{sd.name} {sd.version}'s release source, built by the wheel recipe {wrec.project.recipe}",
        "hashes": sha256_hash(sd.sha256), "purl": f"pkg:pypi/{sd.name}@{sd.version}?file_name={sd.file}",
        **({"externalReferences": [{"type": "source-distribution", "url": sd.url}]} if sd.url else {}),
        "properties": props([("origin", sd.origin)]),
    }
    return [with_licence(comp, licences.of_package(sd.name, metadata))]


def _build_tools(wrec: WheelRecord, chain: ToolchainVersions | None) -> list[dict[str, Any]]:
    """The interpreter, the compilers (maybe detected at attestation time) and the pinned toolchain."""
    py = wrec.python
    out = [with_licence({"type": "application", "bom-ref": "wheel-tool:python", "name": py.implementation.lower(),
                          "version": py.version, "description": f"the interpreter the wheel was built for ({py.tag})"},
                         licences.of_package("python"))]
    pinned = wrec.toolchain_ref
    compilers = {"cc": chain.cc, "cxx": chain.cxx} if chain else {}
    for c in toolchain_components(compilers, "wheel-", pinned.kind):
        if chain and chain.detected_at:
            c["properties"] += props([("detected-at", chain.detected_at)])
        out.append(c)
    if pinned.kind != "host":
        out.append(_pinned_toolchain_component(pinned, "wheel-"))
    return out


def _workflow(wrec: WheelRecord, llvm_ref: str) -> dict[str, Any]:
    llvm, offline, sd = wrec.llvm, wrec.offline, wrec.project.sdist
    return {
        "bom-ref": "workflow:wheel",
        "uid": "sha256:" + wrec.sha256,
        "name": f"hermetic wheel {wrec.project.name} --llvm {llvm.prefix}",
        "taskTypes": ["build"],
        "inputs": [
            {"resource": {"ref": llvm_ref}},
            *([{"resource": {"ref": "sdist"}}] if sd is not None else []),
            {"parameters": [
                {"name": "project", "value": wrec.project.name},
                {"name": "recipe", "value": wrec.project.recipe},
                {"name": "llvm-prefix", "value": llvm.prefix},
                {"name": "llvm-version", "value": llvm.version},
                {"name": "build-requirements.digest", "value": wrec.build_requirements.digest},
                {"name": "recipe.digest", "value": wrec.recipe_digest},
            ]},
            {"environmentVars": [{"name": "SOURCE_DATE_EPOCH", "value": str(wrec.source_date_epoch)}]
             + [{"name": k, "value": v} for k, v in BUILD_ENV]},
        ],
        "outputs": [{"type": "artifact", "resource": {"ref": "wheel"}}],
        "properties": props([("offline.enforced", str(offline.enforced).lower()), ("offline.method", offline.method),
                              ("offline.reason", offline.reason), ("machine", wrec.machine),
                              *_toolchain_props(wrec.toolchain_ref)]),
    }


def wheel_sbom(
    wrec: WheelRecord,
    *,
    license_expression: str,
    llvm_record: BuildRecord | None,
    llvm_origin: LLVMOrigin | None,
    canonical: Mapping[str, str],
    toolchain: ToolchainVersions | None = None,
    metadata: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The SBOM of a wheel: the wheel, what is linked into it, how it was built.

    metadata: the METADATA (or PKG-INFO) text of wheelhouse entries and sdists by project name, where the
    attesting machine has them; their own licence expressions win over the pinned table.
    """
    meta = {k.lower().replace("_", "-"): v for k, v in (metadata or {}).items()}
    bom = new_bom(_subject(wrec, license_expression), "sha256:" + wrec.sha256, wrec.source_date_epoch)
    llvm_ref = "llvm-tree"
    tools: list[dict[str, Any]] = []
    workflows: list[dict[str, Any]] = []
    if llvm_record is not None:
        part = llvm_part(llvm_record, canonical, ref=llvm_ref)
        components, deps = list(part["components"]), list(part["dependencies"])
        tools += part["tools"]
        workflows.append(part["workflow"])
    else:
        components, deps = [_foreign_llvm(wrec, llvm_origin, llvm_ref)], [{"ref": llvm_ref, "dependsOn": []}]
    linked = [llvm_ref]
    pinned = {p.name: p for p in wrec.build_requirements.pinned}
    if "nanobind" in pinned:
        components.append(_nanobind(pinned["nanobind"], meta))
        deps.append({"ref": "nanobind", "dependsOn": []})
        linked.append("nanobind")
    chain = toolchain or wrec.toolchain
    for c in runtime_components(wrec.toolchain_ref.kind, chain.cxx if chain else "", "wheel-"):
        components.append(c)
        deps.append({"ref": c["bom-ref"], "dependsOn": []})
        linked.append(c["bom-ref"])
    deps.insert(0, {"ref": "wheel", "dependsOn": linked})
    tools += [*_requirement_tools(pinned, meta), *_sdist_tool(wrec, meta), *_build_tools(wrec, chain)]
    workflows.append(_workflow(wrec, llvm_ref))
    bom["components"] = components
    bom["dependencies"] = deps
    bom["formulation"] = [{"bom-ref": "formula:wheel", "components": unique_components(tools), "workflows": workflows}]
    return bom
