"""The CycloneDX SBOM of a wheel `hermetic wheel` built, one builder per component (sbom.py has the format).

The wheel, what is linked into it (the LLVM, nanobind, the compiler's runtime
parts), and how it was built (the hash-pinned build requirements, the
interpreter, the compilers, the pinned toolchain, a third-party recipe's
sdist), each with its SPDX licence and where that was read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hermetic.attest import licences
from hermetic.attest.sbom import (
    BUILD_ENV,
    LLVM_LICENSE,
    LLVM_VCS,
    LLVM_WEBSITE,
    _bom,
    _license,
    _pinned_toolchain_component,
    _props,
    _sha256,
    _toolchain_components,
    _toolchain_props,
    _unique,
    _with_licence,
    llvm_part,
    runtime_components,
)

if TYPE_CHECKING:
    from hermetic.attest.sbom import LLVMOrigin
    from hermetic.model.record import BuildRecord, PinnedRequirement, ToolchainVersions, WheelRecord

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
        "hashes": _sha256(wrec.sha256),
        "purl": f"pkg:pypi/{dist.replace('_', '-')}@{version}?file_name={name}",
        "properties": _props([("wheel.file", name), ("wheel.tag", wrec.tag), ("wheel.size", wrec.size),
                              ("glibc-required", wrec.glibc_required), ("platform-tag.from", wrec.platform_tag.source)]),
    }
    if sd is not None:
        subject["externalReferences"] = [{"type": "source-distribution", "url": sd.url or f"file:{sd.file}",
                                          "hashes": _sha256(sd.sha256)}]
    return _with_licence(subject, found)


def _foreign_llvm(wrec: WheelRecord, origin: LLVMOrigin | None, ref: str) -> dict[str, Any]:
    """The LLVM a wheel links when it is not a hermetic build: a prefix, maybe a distribution package."""
    llvm = wrec.llvm
    comp: dict[str, Any] = {
        "type": "library", "bom-ref": ref, "name": "llvm", "version": llvm.version,
        "description": f"LLVM {llvm.version} at {llvm.prefix}, linked statically",
        "licenses": _license(LLVM_LICENSE),
        "externalReferences": [{"type": "website", "url": LLVM_WEBSITE}, {"type": "vcs", "url": LLVM_VCS}],
        "properties": _props([("prefix", llvm.prefix), ("built-by", "not hermetic: no build record")]),
    }
    if origin is not None:
        comp["purl"] = origin.purl
        comp["properties"] += _props([("package", f"{origin.package} {origin.version}"),
                                      ("source-package", origin.source_package)])
    return comp


def _nanobind(nb: PinnedRequirement, metadata: Mapping[str, str]) -> dict[str, Any]:
    comp = {
        "type": "library", "bom-ref": "nanobind", "name": "nanobind", "version": nb.version,
        "description": "compiled into the extension module (static)",
        "purl": f"pkg:pypi/nanobind@{nb.version}",
        "hashes": [{"alg": "SHA-256", "content": h} for h in nb.sha256],
    }
    return _with_licence(comp, licences.of_package("nanobind", metadata))


def _requirement_tools(pinned: Mapping[str, PinnedRequirement], metadata: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every hash-pinned wheelhouse entry the build ran, with the licence its own METADATA states."""
    return [
        _with_licence(
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
        "hashes": _sha256(sd.sha256), "purl": f"pkg:pypi/{sd.name}@{sd.version}?file_name={sd.file}",
        **({"externalReferences": [{"type": "source-distribution", "url": sd.url}]} if sd.url else {}),
        "properties": _props([("origin", sd.origin)]),
    }
    return [_with_licence(comp, licences.of_package(sd.name, metadata))]


def _build_tools(wrec: WheelRecord, chain: ToolchainVersions | None) -> list[dict[str, Any]]:
    """The interpreter, the compilers (maybe detected at attestation time) and the pinned toolchain."""
    py = wrec.python
    out = [_with_licence({"type": "application", "bom-ref": "wheel-tool:python", "name": py.implementation.lower(),
                          "version": py.version, "description": f"the interpreter the wheel was built for ({py.tag})"},
                         licences.of_package("python"))]
    pinned = wrec.toolchain_ref
    compilers = {"cc": chain.cc, "cxx": chain.cxx} if chain else {}
    for c in _toolchain_components(compilers, "wheel-", pinned.kind):
        if chain and chain.detected_at:
            c["properties"] += _props([("detected-at", chain.detected_at)])
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
        "properties": _props([("offline.enforced", str(offline.enforced).lower()), ("offline.method", offline.method),
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
    bom = _bom(_subject(wrec, license_expression), "sha256:" + wrec.sha256, wrec.source_date_epoch)
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
    bom["formulation"] = [{"bom-ref": "formula:wheel", "components": _unique(tools), "workflows": workflows}]
    return bom
