"""SLSA v1 provenance in an in-toto Statement v1, for LLVM images and compiler wheels.

The statement says which artifact (subject: name and sha256), how it was
built (buildType, the external parameters a user chose: recipe, variant,
options; the internal ones hermetic fixed: SOURCE_DATE_EPOCH, environment,
offline enforcement), from what (resolvedDependencies with their digests)
and by whom and when (builder id, start and finish). Unlike the SBOM it
describes one run, so it carries times and is not reproducible byte for byte.

Digests that are not plain file hashes (hermetic's recipe and tree digests)
go under their own algorithm names, so no verifier mistakes them for the
sha256 of a file.
"""

from __future__ import annotations

import json
import platform
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hermetic import __version__
from hermetic.attest.cyclonedx import origin_uri, tool_version, toolchain_package, toolchain_purl
from hermetic.core import times

if TYPE_CHECKING:
    from hermetic.attest.cyclonedx import ImageFacts
    from hermetic.model.record import BuildRecord, Offline, ToolchainRef, ToolchainVersions, WheelRecord

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
MEDIA_TYPE = "application/vnd.in-toto+json"
BUILD_TYPE_LLVM_IMAGE = "urn:hermetic:build-type:llvm-image:v1"
BUILD_TYPE_WHEEL = "urn:hermetic:build-type:wheel:v1"
DEFAULT_BUILDER_ID = "urn:hermetic:builder:local"
# digest algorithm names for hermetic's own digests (a digest over a canonical listing, not over one file)
TREE_DIGEST = "hermeticTreeSha256"
RECIPE_DIGEST = "hermeticRecipeSha256"
REQUIREMENTS_DIGEST = "hermeticRequirementsSha256"


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def _tools(toolchain: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name in ("cc", "cxx", "cmake", "ninja", "conan", "python"):
        line = str(toolchain.get(name, "") or "")
        if line:
            out.append(
                {
                    "name": name,
                    "uri": f"pkg:generic/{name}@{tool_version(line)}",
                    "annotations": {"versionLine": line, "role": "toolchain"},
                }
            )
    return out


def builder(builder_id: str) -> dict[str, Any]:
    return {
        "id": builder_id,
        "version": {
            "hermetic": __version__,
            "python": platform.python_version(),
            "host": f"{platform.system().lower()}-{platform.machine()}",
        },
    }


def _offline(off: Offline) -> dict[str, Any]:
    return {"enforced": off.enforced, "method": off.method, "reason": off.reason}


def llvm_dependencies(rec: BuildRecord, canonical: Mapping[str, str]) -> list[dict[str, Any]]:
    deps: list[dict[str, Any]] = []
    for s in rec.sources:
        d: dict[str, Any] = {
            "name": s.file,
            "digest": {"sha256": s.sha256},
            "annotations": {"origin": s.origin, "role": "release-source"},
        }
        uri = origin_uri(s.origin, canonical.get(s.file, ""))
        if uri:
            d["uri"] = uri
        deps.append(d)
    pruned = rec.pruned
    if pruned:
        deps.append(
            {
                "name": pruned.file,
                "digest": {"sha256": pruned.sha256},
                "annotations": {
                    "role": "pruned-source",
                    "derivedFrom": pruned.source.file,
                    "pruneKey": pruned.key,
                },
            }
        )
    elif not rec.sources:
        sa = rec.source_archive
        deps.append({"name": sa.file, "digest": {"sha256": sa.sha256}})
    recipe = rec.recipe
    deps.append(
        {
            "name": f"recipes/{recipe.name}",
            "digest": {RECIPE_DIGEST: recipe.digest},
            "annotations": {"role": "recipe", "version": recipe.version},
        }
    )
    return deps + _pinned_toolchain(rec.toolchain_ref) + _tools(rec.toolchain.as_json() if rec.toolchain else {})


def _pinned_toolchain(tc: ToolchainRef) -> list[dict[str, Any]]:
    """The pinned toolchain wheel as a resolved dependency with its sha256; none for the host's compiler."""
    if tc.kind == "host":
        return []
    package, version = toolchain_package(tc)
    return [
        {
            "name": f"toolchain:{package}-{version}",
            "uri": toolchain_purl(tc),
            "digest": {"sha256": tc.sha256},
            "annotations": {"role": "pinned-toolchain", "toolchain": tc.name, "file": tc.file,
                            "target": tc.target, "glibc": tc.glibc},
        }
    ]


def _external_llvm(rec: BuildRecord) -> dict[str, Any]:
    return {
        "recipe": {
            "name": rec.recipe.name,
            "version": rec.recipe.version,
            "digest": {RECIPE_DIGEST: rec.recipe.digest},
        },
        "variant": rec.variant,
        "options": dict(rec.options),
        "source": "pruned" if rec.pruned else "full",
        "toolchain": rec.toolchain_ref.as_json(),
    }


def image_statement(
    rec: BuildRecord,
    image: ImageFacts,
    canonical: Mapping[str, str],
    *,
    started: float,
    finished: float,
    record_sha256: str,
    builder_id: str = DEFAULT_BUILDER_ID,
    signing: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    tree = rec.tree
    layer_types = sorted({mt for mt, _, _ in image.layers})
    external = _external_llvm(rec) | {
        "image": {"name": image.name, "os": image.os, "architecture": image.arch, "layerMediaTypes": layer_types}
    }
    byproducts: list[dict[str, Any]] = [
        {"name": "record.json", "digest": {"sha256": record_sha256}, "annotations": {"role": "build-record"}},
        {"name": rec.prefix, "digest": {TREE_DIGEST: _hex(tree.digest)},
         "annotations": {"role": "install-tree", "size": str(tree.size)}},
    ]
    for p in rec.test_package.ptx:
        byproducts.append({"name": f"test_package/{p.file}", "digest": {"sha256": p.sha256},
                           "annotations": {"role": "test_package-output"}})
    return _statement(
        subjects=[{"name": image.name, "digest": {"sha256": _hex(image.manifest_digest)}}],
        build_type=BUILD_TYPE_LLVM_IMAGE,
        external=external,
        internal={
            "sourceDateEpoch": rec.source_date_epoch,
            "environment": {"LC_ALL": "C", "TZ": "UTC", "PYTHONHASHSEED": "0", "umask": "022"},
            "offline": _offline(rec.offline),
            "jobs": rec.jobs,
            "inputsDigest": rec.inputs_digest,
            "machine": (rec.toolchain.machine if rec.toolchain else None) or "",
            **({"signing": dict(signing)} if signing is not None else {}),
        },
        deps=llvm_dependencies(rec, canonical),
        builder_id=builder_id,
        invocation=rec.inputs_digest + record_sha256,
        started=started,
        finished=finished,
        byproducts=byproducts,
    )


def wheel_statement(
    wrec: WheelRecord,
    *,
    llvm_record: BuildRecord | None,
    canonical: Mapping[str, str],
    started: float,
    finished: float,
    record_sha256: str,
    toolchain: ToolchainVersions | None = None,
    builder_id: str = DEFAULT_BUILDER_ID,
    signing: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    llvm = wrec.llvm
    reqs = wrec.build_requirements
    deps: list[dict[str, Any]] = []
    llvm_dep: dict[str, Any] = {
        "name": "llvm",
        "uri": "file://" + llvm.prefix,
        "annotations": {"role": "llvm-prefix", "version": llvm.version},
    }
    if llvm_record is not None:
        llvm_dep["digest"] = {TREE_DIGEST: _hex(llvm_record.tree.digest)}
        llvm_dep["annotations"]["variant"] = llvm_record.variant
    deps.append(llvm_dep)
    sd = wrec.project.sdist
    if sd is not None:
        deps.insert(0, {"name": sd.file, "uri": sd.url or f"pkg:pypi/{sd.name}@{sd.version}?file_name={sd.file}",
                        "digest": {"sha256": sd.sha256},
                        "annotations": {"role": "source", "distribution": sd.name, "version": sd.version,
                                        "origin": sd.origin}})
    if llvm_record is not None:
        deps += [d for d in llvm_dependencies(llvm_record, canonical) if (d.get("annotations") or {}).get("role") != "toolchain"]
    for p in reqs.pinned:
        deps.append(
            {
                "name": p.name,
                "uri": f"pkg:pypi/{p.name}@{p.version}",
                "digest": {"sha256": (p.sha256 or ("",))[0]},
                "annotations": {"role": "build-requirement"},
            }
        )
    # The wheel's own compiler; the LLVM's (above) is the same wheel when the build was consistent.
    deps += [d for d in _pinned_toolchain(wrec.toolchain_ref) if d not in deps]
    chain = toolchain or wrec.toolchain
    deps += _tools({"cc": chain.cc, "cxx": chain.cxx} if chain else {})
    py = wrec.python
    deps.append({"name": "python", "uri": f"pkg:generic/python@{py.version}",
                 "annotations": {"role": "toolchain", "tag": py.tag}})
    return _statement(
        subjects=[{"name": wrec.wheel, "digest": {"sha256": wrec.sha256}}],
        build_type=BUILD_TYPE_WHEEL,
        external={
            "project": wrec.project.name,
            "llvmPrefix": llvm.prefix,
            "recipe": {"name": wrec.project.recipe, "digest": {RECIPE_DIGEST: wrec.recipe_digest}},
            **({"sdist": {"name": sd.name, "version": sd.version, "file": sd.file}} if sd is not None else {}),
            "buildRequirements": {"digest": {REQUIREMENTS_DIGEST: reqs.digest}},
            "toolchain": wrec.toolchain_ref.as_json(),
        },
        internal={
            "sourceDateEpoch": wrec.source_date_epoch,
            "environment": {"LC_ALL": "C", "TZ": "UTC", "PYTHONHASHSEED": "0", "umask": "022"},
            "offline": _offline(wrec.offline),
            "pip": "--no-index --no-build-isolation, from the hash-pinned wheelhouse",
            "machine": wrec.machine,
            **({"signing": dict(signing)} if signing is not None else {}),
        },
        deps=deps,
        builder_id=builder_id,
        invocation=wrec.sha256 + record_sha256,
        started=started,
        finished=finished,
        byproducts=[{"name": "wheel-record.json", "digest": {"sha256": record_sha256},
                     "annotations": {"role": "build-record"}}],
    )


def _statement(
    *,
    subjects: list[dict[str, Any]],
    build_type: str,
    external: dict[str, Any],
    internal: dict[str, Any],
    deps: list[dict[str, Any]],
    builder_id: str,
    invocation: str,
    started: float,
    finished: float,
    byproducts: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": build_type,
                "externalParameters": external,
                "internalParameters": internal,
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": builder(builder_id),
                "metadata": {
                    "invocationId": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'hermetic:' + invocation)}",
                    "startedOn": times.iso(started),
                    "finishedOn": times.iso(max(finished, started)),
                },
                "byproducts": byproducts,
            },
        },
    }


def dumps(statement: Mapping[str, Any]) -> bytes:
    return json.dumps(statement, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


# -- reading one back ------------------------------------------------------------------------------------


def subject_sha256s(statement: Mapping[str, Any]) -> list[str]:
    return [str((s.get("digest") or {}).get("sha256", "")) for s in statement.get("subject") or []]


def check_statement(statement: Any) -> list[str]:
    """Problems with the shape of an in-toto Statement v1 with a SLSA v1 predicate; empty when none."""
    if not isinstance(statement, dict):
        return ["not a JSON object"]
    problems = []
    if statement.get("_type") != STATEMENT_TYPE:
        problems.append(f"_type is {statement.get('_type')!r}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"predicateType is {statement.get('predicateType')!r}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        problems.append("no subject")
    else:
        for s in subjects:
            if not isinstance(s, dict) or not s.get("digest") or not isinstance(s.get("digest"), dict):
                problems.append(f"subject without digest: {s!r}")
    pred = statement.get("predicate") or {}
    bd = pred.get("buildDefinition") or {}
    rd = pred.get("runDetails") or {}
    if not isinstance(bd.get("buildType"), str) or not bd.get("buildType"):
        problems.append("no buildDefinition.buildType")
    if not isinstance(bd.get("externalParameters"), dict):
        problems.append("no buildDefinition.externalParameters")
    for d in bd.get("resolvedDependencies") or []:
        if not any(d.get(k) for k in ("uri", "digest", "content")):
            problems.append(f"resolved dependency without uri, digest or content: {d.get('name')!r}")
    if not isinstance((rd.get("builder") or {}).get("id"), str):
        problems.append("no runDetails.builder.id")
    meta = rd.get("metadata") or {}
    for k in ("startedOn", "finishedOn"):
        try:
            times.parse_iso(str(meta.get(k)))
        except ValueError:
            problems.append(f"runDetails.metadata.{k} is not an RFC 3339 UTC time: {meta.get(k)!r}")
    return problems
