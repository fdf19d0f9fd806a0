"""`hermetic inspect`: what an artifact is, what it was built from, and whether its attestations match it.

Works on an OCI image layout, an image in a registry (REGISTRY/REPO[:TAG]),
a wheel (with its wheel-record.json and sidecar attestations) and an LLVM
build record; a bundle is listed with its inputs and its signature status.
Every attestation found is checked against the artifact's
digest and against what the artifact itself says (image labels, wheel
record); a present attestation that does not match exits with the verify
code, a missing one is reported as missing.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermetic.attest import attach as attest
from hermetic.attest import provenance, sbom
from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError
from hermetic.model import record
from hermetic.model.artifacts import is_bundle_manifest
from hermetic.oci import referrers, referrers_registry
from hermetic.oci.layout import Layout
from hermetic.oci.types import INDEX_TYPES, MANIFEST_TYPES, Descriptor, host_arch, parse_json, sha256_digest

OK, MISSING, MISMATCH = "matches", "missing", "MISMATCH"


def _hex(d: str) -> str:
    return d.removeprefix("sha256:")


# -- checks -------------------------------------------------------------------------------------------------


def check_image_sbom(bom: Any, facts: sbom.ImageFacts) -> list[str]:
    if not isinstance(bom, dict):
        return ["not a JSON object"]
    problems = []
    if bom.get("bomFormat") != "CycloneDX" or bom.get("specVersion") != sbom.SPEC_VERSION:
        problems.append(f"not CycloneDX {sbom.SPEC_VERSION}: {bom.get('bomFormat')} {bom.get('specVersion')}")
    if sbom.subject_sha256(bom) != _hex(facts.manifest_digest):
        problems.append(f"describes sha256:{sbom.subject_sha256(bom)}, the image is {facts.manifest_digest}")
    tree = sbom.property_of(sbom.find_component(bom, "llvm-tree"), "tree.digest")
    label = facts.labels.get(attest.LABEL + "tree.digest", "")
    if label and tree != label:
        problems.append(f"install tree {tree or 'missing'}, the image's label says {label}")
    pruned = sbom.find_component(bom, "source:pruned")
    label_pruned = _hex(facts.labels.get(attest.LABEL + "pruned.digest", ""))
    if label_pruned and [h.get("content") for h in pruned.get("hashes") or []] != [label_pruned]:
        problems.append(f"pruned source differs from the image's label sha256:{label_pruned}")
    for key, value in facts.labels.items():
        if key.startswith(attest.LABEL + "source."):
            comp = sbom.find_component(bom, "source:" + key.removeprefix(attest.LABEL + "source."))
            if [h.get("content") for h in comp.get("hashes") or []] != [_hex(value)]:
                problems.append(f"source {key.removeprefix(attest.LABEL + 'source.')} differs from the image's label")
    return problems


def check_image_provenance(statement: Any, facts: sbom.ImageFacts) -> list[str]:
    problems = provenance.check_statement(statement)
    if problems:
        return problems
    if _hex(facts.manifest_digest) not in provenance.subject_sha256s(statement):
        problems.append(f"its subject is {provenance.subject_sha256s(statement)}, the image is {facts.manifest_digest}")
    bd = statement["predicate"]["buildDefinition"]
    ext = bd["externalParameters"]
    labels = facts.labels
    if labels.get(attest.LABEL + "variant") and ext.get("variant") != labels[attest.LABEL + "variant"]:
        problems.append(f"variant {ext.get('variant')!r}, the image's label says {labels[attest.LABEL + 'variant']!r}")
    digest = ((ext.get("recipe") or {}).get("digest") or {}).get(provenance.RECIPE_DIGEST)
    if labels.get(attest.LABEL + "recipe.digest") and digest != labels[attest.LABEL + "recipe.digest"]:
        problems.append("recipe digest differs from the image's label")
    deps = bd.get("resolvedDependencies") or []
    pruned = [d for d in deps if (d.get("annotations") or {}).get("role") == "pruned-source"]
    label_pruned = _hex(labels.get(attest.LABEL + "pruned.digest", ""))
    if label_pruned and [(d.get("digest") or {}).get("sha256") for d in pruned] != [label_pruned]:
        problems.append("pruned source differs from the image's label")
    trees = [
        (b.get("digest") or {}).get(provenance.TREE_DIGEST)
        for b in statement["predicate"]["runDetails"].get("byproducts") or []
        if (b.get("annotations") or {}).get("role") == "install-tree"
    ]
    label_tree = _hex(labels.get(attest.LABEL + "tree.digest", ""))
    if label_tree and trees != [label_tree]:
        problems.append("install tree digest differs from the image's label")
    return problems


def check_image_record(data: Any, facts: sbom.ImageFacts) -> list[str]:
    """The build record attached to an image (what a substituting machine writes from) against the image."""
    try:
        rec = record.BuildRecord.from_json(data, "the attached build record")
    except VerifyError as exc:
        return [exc.why or exc.what]
    problems = []
    labels = facts.labels
    if labels.get(attest.LABEL + "tree.digest") and rec.tree.digest != labels[attest.LABEL + "tree.digest"]:
        problems.append(f"it records tree {rec.tree.digest}, the image's label says {labels[attest.LABEL + 'tree.digest']}")
    if labels.get(attest.LABEL + "variant") and rec.variant != labels[attest.LABEL + "variant"]:
        problems.append(f"variant {rec.variant!r}, the image's label says {labels[attest.LABEL + 'variant']!r}")
    return problems


def _verdict(found: bool, problems: list[str]) -> str:
    return MISSING if not found else (OK if not problems else MISMATCH)


def _summary_of_provenance(statement: Mapping[str, Any]) -> dict[str, Any]:
    pred = statement.get("predicate") or {}
    bd = pred.get("buildDefinition") or {}
    rd = pred.get("runDetails") or {}
    internal = bd.get("internalParameters") or {}
    return {
        "buildType": bd.get("buildType"),
        "externalParameters": bd.get("externalParameters"),
        "offline": internal.get("offline"),
        "signing": internal.get("signing"),
        "sourceDateEpoch": internal.get("sourceDateEpoch"),
        "builder": (rd.get("builder") or {}).get("id"),
        "startedOn": (rd.get("metadata") or {}).get("startedOn"),
        "finishedOn": (rd.get("metadata") or {}).get("finishedOn"),
        "resolvedDependencies": [
            {"name": d.get("name"), "digest": d.get("digest"), "uri": d.get("uri")}
            for d in bd.get("resolvedDependencies") or []
        ],
    }


def licence_summary(bom: Mapping[str, Any]) -> dict[str, Any]:
    """SPDX expression -> the components under it: those in the artifact, and the tools that built it."""
    def group(components: list[Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for c in components:
            if not isinstance(c, dict):
                continue
            exprs = [str(lic.get("expression") or (lic.get("license") or {}).get("id") or "?")
                     for lic in c.get("licenses") or []] or ["(none stated)"]
            label = f"{c.get('name')} {c.get('version')}".strip() if c.get("version") else str(c.get("name"))
            for e in exprs:
                out.setdefault(e, []).append(label)
        return {k: sorted(set(v)) for k, v in sorted(out.items())}

    inside = [(bom.get("metadata") or {}).get("component"), *(bom.get("components") or [])]
    tools = [c for f in bom.get("formulation") or [] for c in f.get("components") or []]
    return {"artifact": group(inside), "build": group(tools)}


def image_signing_status(refs: list[referrers.Referrer], digest: str) -> dict[str, Any]:
    kinds = sorted({r.kind for r in refs if r.subject == digest and r.kind in (
        referrers.KIND_SIGNATURE, attest.KIND_SBOM_DSSE, attest.KIND_PROVENANCE_DSSE)})
    return {"status": "signed" if kinds else "unsigned", "kinds": kinds,
            "check": "hermetic verify --key PUB (nothing is verified without the publisher's key)"}


# -- images -------------------------------------------------------------------------------------------------


def image_report(facts: sbom.ImageFacts, refs: list[referrers.Referrer], location: str, how: str) -> dict[str, Any]:
    labels = facts.labels
    built_from = {
        "recipe": {k: labels.get(attest.LABEL + k, "") for k in ("recipe", "recipe.version", "recipe.digest")},
        "variant": labels.get(attest.LABEL + "variant", ""),
        "prefix": labels.get(attest.LABEL + "prefix", ""),
        "install_tree": labels.get(attest.LABEL + "tree.digest", ""),
        "pruned_source": labels.get(attest.LABEL + "pruned.digest", ""),
        "sources": {
            k.removeprefix(attest.LABEL + "source."): v for k, v in sorted(labels.items())
            if k.startswith(attest.LABEL + "source.")
        },
        "license": labels.get("org.opencontainers.image.licenses", ""),
    }
    atts: dict[str, Any] = {}
    licence_table: dict[str, Any] = {}
    for kind, media_type, check in (
        ("sbom", sbom.MEDIA_TYPE, check_image_sbom),
        ("provenance", provenance.MEDIA_TYPE, check_image_provenance),
        ("build-record", record.RECORD_MEDIA_TYPE, check_image_record),
    ):
        mine = [r for r in refs if r.artifact_type == media_type and r.subject == facts.manifest_digest]
        entry: dict[str, Any] = {"status": MISSING, "found": how}
        if mine:
            r = mine[-1]
            try:
                doc = json.loads(r.read())
            except ValueError as exc:
                doc, problems = None, [f"not JSON: {exc}"]
            else:
                problems = check(doc, facts)
            entry = {"status": _verdict(True, problems), "artifact": r.digest, "subject": r.subject,
                     "problems": problems, "found": how}
            if kind == "sbom" and isinstance(doc, dict):
                entry["format"] = f"CycloneDX {doc.get('specVersion')}"
                entry["components"] = len(doc.get("components") or [])
                licence_table = licence_summary(doc)
            if kind == "provenance" and isinstance(doc, dict):
                entry["predicateType"] = doc.get("predicateType")
                built_from["provenance"] = _summary_of_provenance(doc)
        atts[kind] = entry
    return {
        "artifact": {
            "kind": "oci-image",
            "name": facts.name,
            "title": facts.title,
            "location": location,
            "digest": facts.manifest_digest,
            "platform": f"{facts.os}/{facts.arch}",
            "config": facts.config_digest,
            "layers": [{"mediaType": mt, "digest": d, "size": s} for mt, d, s in facts.layers],
        },
        "built_from": built_from,
        "attestations": atts,
        "signatures": image_signing_status(refs, facts.manifest_digest),
        "licences": licence_table,
    }


def inspect_layout(path: Path, arch: str | None = None) -> dict[str, Any]:
    layout = Layout(path)
    layout.verify()
    facts, _ = attest.image_facts(layout, arch)
    return image_report(facts, referrers.referrers(layout), str(path.absolute()), f"{path}/{referrers.REFERRERS_FILE}")


def inspect_bundle(path: Path) -> dict[str, Any]:
    """A bundle: its inputs (every blob checked against its digest) and the plan it was made for; nothing built."""
    from hermetic.oci.bundle import open_layout

    opened = open_layout(path)
    plan = next((e for e in opened.entries if e.role == "plan"), None)
    doc = parse_json(opened.layout.blob_path("sha256:" + plan.sha256).read_bytes(), f"the plan of {path}",
                     "bundle again") if plan else {}
    shown = doc if isinstance(doc, dict) else {}
    return {
        "artifact": {
            "kind": "bundle",
            "name": opened.name,
            "location": str(path.absolute()),
            "digest": opened.manifest.digest,
            "inputs": [{"role": e.role, "name": e.name, "sha256": e.sha256, "size": e.size} for e in opened.entries],
        },
        "builds": {
            "recipe": {"path": opened.llvm_recipe, "version": opened.llvm_version, "digest": opened.recipe_digest},
            "variant": shown.get("variant", ""),
            "arch": shown.get("arch", ""),
            "steps": len(shown.get("steps") or []),
        },
        "attestations": {"none": "a bundle holds the inputs of a build, not a build: its signature covers them all"},
        "signatures": image_signing_status(referrers.referrers(opened.layout), opened.manifest.digest),
    }


def inspect_ref(
    text: str, insecure: bool, arch: str | None, quiet: bool, ca_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    from hermetic.oci.registry import Progress, make_client
    from hermetic.oci.types import parse_reference

    ref = parse_reference(text)
    client = make_client(
        ref, insecure=insecure, environ=os.environ if environ is None else environ, progress=Progress(enabled=not quiet),
        ca_file=Path(ca_file) if ca_file else None,
    )
    repo = ref.repository
    try:
        media_type, body = client.get_manifest(repo, ref.reference)
        digest = sha256_digest(body)
        if ref.digest and digest != ref.digest:
            raise VerifyError(f"manifest of {ref} does not match its digest", f"received {digest}", "")
        if media_type in INDEX_TYPES:
            want = arch or host_arch()
            children = [Descriptor.from_json(m, digest) for m in _manifest_list(body, str(ref))]
            chosen = next((c for c in children if (c.platform or {}).get("architecture") == want), None)
            if chosen is None:
                raise UsageError(f"{ref} has no linux/{want} image", "", "pass --arch")
            media_type, body = client.get_manifest(repo, chosen.digest)
            digest = sha256_digest(body)
            if digest != chosen.digest:
                raise VerifyError(f"manifest {chosen.digest} of {ref} does not match its digest", digest, "")
        if media_type not in MANIFEST_TYPES:
            raise UsageError(f"{ref} is a {media_type!r}, not an image", "", "")
        doc = parse_json(body, f"manifest of {ref}")
        if not isinstance(doc, dict):
            raise VerifyError(f"manifest of {ref} is not a JSON object", "", "the registry serves damaged data")
        if is_bundle_manifest(doc):
            raise UsageError(f"{ref} is a hermetic bundle, not an image", "a bundle is inspected from its layout",
                             f"pull it (`hermetic pull {ref} --layout DIR`), then `hermetic inspect DIR`")
        manifest = Descriptor(media_type, digest, len(body))
        with tempfile.TemporaryDirectory(prefix="hermetic-inspect-") as tmp:
            layout = Layout(Path(tmp))
            layout.init()
            layout.put_bytes(body)
            config_desc = layout.children(manifest)[0]  # every descriptor of the manifest checked, not just this
            client.fetch_blob(repo, config_desc, layout.blob_path(config_desc.digest))
            config = layout.read_json(config_desc)
            facts = attest.facts_of(ref.tag or repo.rsplit("/", 1)[-1], manifest, doc, config_desc.digest, config)
            refs, via = referrers_registry.pull_referrers(client, repo, digest, layout)
            report = image_report(facts, refs, str(ref), f"registry ({via})")
            # image signatures live under their own tag (sha256-<hex>.sig), not among the referrers
            from hermetic.attest.image_signatures import in_registry
            from hermetic.attest.signing import sig_tag

            sigs = in_registry(client, repo, digest)
            if sigs:
                sig = report["signatures"]
                sig["status"] = "signed"
                sig["kinds"] = [*sig["kinds"], f"{len(sigs)} image signature(s) under {sig_tag(digest)}"]
            return report
    finally:
        client.close()


def _manifest_list(body: bytes, where: str) -> list[Any]:
    doc = parse_json(body, f"index of {where}")
    manifests = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(manifests, list):
        raise VerifyError(f"index of {where} has no manifests list", "", "the registry serves damaged data")
    return manifests


# -- wheels and records -------------------------------------------------------------------------------------


def inspect_wheel(path: Path) -> dict[str, Any]:
    art = attest.find_wheel(path)
    wrec = art.record
    if not art.wheel.is_file():
        raise UsageError(f"{art.wheel} does not exist", f"{art.record_path} names it", "")
    digest = file_sha256(art.wheel)
    llvm = wrec.llvm
    out: dict[str, Any] = {
        "artifact": {
            "kind": "wheel",
            "name": art.wheel.name,
            "location": str(art.wheel.absolute()),
            "digest": "sha256:" + digest,
            "tag": wrec.tag,
            "record": str(art.record_path),
            "record_matches": wrec.sha256 == digest,
        },
        "built_from": {
            "project": wrec.project.name,
            "llvm": {"prefix": llvm.prefix, "version": llvm.version,
                     "record": llvm.record.as_json() if llvm.record else None},
            "python": wrec.python.version,
            "pinned_toolchain": wrec.toolchain_ref.label,  # `host` for records written before it was recorded
            "build_requirements": wrec.build_requirements.digest,
            "pinned": {p.name: p.version for p in wrec.build_requirements.pinned},
            "source_date_epoch": wrec.source_date_epoch,
            "offline": wrec.offline.as_json(),
        },
        "attestations": {},
    }
    sbom_path, prov_path = attest.sidecars(art.wheel)
    for kind, p in (("sbom", sbom_path), ("provenance", prov_path)):
        if not p.is_file():
            out["attestations"][kind] = {"status": MISSING, "found": str(p)}
            continue
        try:
            doc = json.loads(p.read_text())
        except ValueError as exc:
            out["attestations"][kind] = {"status": MISMATCH, "found": str(p), "problems": [f"not JSON: {exc}"]}
            continue
        if kind == "sbom":
            problems = [] if sbom.subject_sha256(doc) == digest else [
                f"describes sha256:{sbom.subject_sha256(doc)}, the wheel is sha256:{digest}"]
            out["licences"] = licence_summary(doc)
        else:
            problems = provenance.check_statement(doc) or ([] if digest in provenance.subject_sha256s(doc) else [
                f"its subject is {provenance.subject_sha256s(doc)}, the wheel is sha256:{digest}"])
            if not problems:
                out["built_from"]["provenance"] = _summary_of_provenance(doc)
        out["attestations"][kind] = {"status": _verdict(True, problems), "found": str(p), "problems": problems}
    signed = [p.name for p in attest.signed_sidecars(art.wheel) if p.is_file()]
    out["signatures"] = {"status": "signed" if signed else "unsigned", "envelopes": signed,
                         "check": "hermetic verify --key PUB (nothing is verified without the publisher's key)"}
    return out


def inspect_record(path: Path) -> dict[str, Any]:
    rec = record.load_build_record(path)
    root = Path(rec.install_root)
    if not root.is_absolute():
        root = (path.parent / root).resolve()
    on_disk = record.tree_digest(record.scan_tree(root)) if root.is_dir() else None
    # the record's digest is that of its own file list: a digest edited by hand is caught without the tree
    listed = record.tree_digest(rec.tree.files)
    return {
        "artifact": {
            "kind": "llvm-install-tree",
            "name": f"llvm-{rec.variant}-{rec.recipe.version}",
            "location": str(root),
            "digest": rec.tree.digest,
            "listed": listed,
            "on_disk": on_disk,
            "record_matches": False if listed != rec.tree.digest else (on_disk == rec.tree.digest if on_disk else None),
            "tree_checked": on_disk is not None,
        },
        "built_from": {
            "recipe": rec.recipe.as_json(),
            "variant": rec.variant,
            "options": dict(rec.options),
            "sources": [s.as_json() for s in rec.sources],
            "pruned_source": rec.pruned.sha256 if rec.pruned else None,
            "pinned_toolchain": rec.toolchain_ref.label,  # `host` for records written before it was recorded
            "toolchain": rec.toolchain.as_json() if rec.toolchain else None,
            "offline": rec.offline.as_json(),
            "source_date_epoch": rec.source_date_epoch,
        },
        "attestations": {"note": "install trees are attested through their images (hermetic image llvm)"},
    }


# -- output -------------------------------------------------------------------------------------------------


def _flat(value: object) -> str:
    """One line for a value of a report: mappings as key=value pairs, never a Python repr."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_flat(v)}" for k, v in value.items() if v not in (None, ""))
    if isinstance(value, list):
        return "; ".join(_flat(v) for v in value)
    return str(value)


def render(report: Mapping[str, Any]) -> str:
    a = report["artifact"]
    title = a["name"] if a.get("title", a["name"]) == a["name"] else f"{a['title']} ({a['name']})"
    lines = [f"{a['kind']}: {title}", f"  location  {a['location']}", f"  digest    {a['digest']}"]
    for key in ("platform", "tag", "config"):
        if a.get(key):
            lines.append(f"  {key:<9} {a[key]}")
    for layer in a.get("layers") or []:
        lines.append(f"  layer     {layer['digest']} ({layer['size'] / 1e6:.1f} MB, {layer['mediaType']})")
    for e in a.get("inputs") or []:
        lines.append(f"  input     {e['role']:<12} {e['name']} ({e['size'] / 1e6:.1f} MB, sha256:{e['sha256'][:16]}…)")
    if a.get("kind") == "llvm-install-tree":
        lines += _tree_lines(a)
    elif "record_matches" in a and a["record_matches"] is not None:
        verdict = "matches" if a["record_matches"] else "DOES NOT MATCH"
        lines.append(f"  record    {verdict} ({a['record']})")
    # a bundle builds from what it holds; every other artifact was built from something
    title, part = ("builds:", report["builds"]) if "builds" in report else ("built from:", report["built_from"])
    lines.append(title)
    for k, v in part.items():
        if k == "provenance":
            continue
        items = v if isinstance(v, list) else [v]
        for i, item in enumerate(items or ["-"]):
            lines.append(f"  {k if i == 0 else '':<18} {_flat(item)}")
    prov = part.get("provenance")
    if prov:
        lines.append(f"  {'built':<18} {prov.get('startedOn')} .. {prov.get('finishedOn')} by {prov.get('builder')}")
        off = prov.get("offline") or {}
        lines.append(f"  {'offline':<18} enforced={off.get('enforced')} method={off.get('method')}")
        if isinstance(prov.get("signing"), dict):  # absent from provenances written before it existed
            lines.append(f"  {'signing':<18} {_flat(prov['signing'])}")
        pinned = (prov.get("externalParameters") or {}).get("toolchain")
        if isinstance(pinned, dict):  # absent from provenances written before it existed
            lines.append(f"  {'pinned toolchain':<18} {_flat(pinned)}")
    sig = report.get("signatures")
    if isinstance(sig, dict):
        detail = ", ".join(sig.get("kinds") or sig.get("envelopes") or [])
        lines.append(f"signatures: {sig['status'].upper() if sig['status'] == 'unsigned' else sig['status']}"
                     + (f" ({detail}; not checked here: {sig['check']})" if detail else ""))
    lines += _render_licences(report.get("licences") or {})
    lines.append("attestations:")
    for kind, entry in report["attestations"].items():
        if not isinstance(entry, dict):
            lines.append(f"  {entry}")
            continue
        detail = entry.get("artifact") or entry.get("found", "")
        extra = entry.get("format") or entry.get("predicateType") or ""
        lines.append(f"  {kind:<11} {entry['status']:<9} {detail} {extra}".rstrip())
        lines += [f"    - {p}" for p in entry.get("problems") or []]
    return "\n".join(lines)


def _render_licences(table: Mapping[str, Any]) -> list[str]:
    if not table:
        return []
    lines = ["licences (from the SBOM):"]
    for part, title in (("artifact", "in it"), ("build", "built with")):
        for expr, names in (table.get(part) or {}).items():
            shown = ", ".join(names[:6]) + (f", … {len(names) - 6} more" if len(names) > 6 else "")
            lines.append(f"  {title:<11} {expr}: {shown}")
    return lines


def _tree_lines(a: Mapping[str, Any]) -> list[str]:
    """A record inspected itself: its digest against its own file list, and against the tree when present."""
    lines = []
    if a.get("listed") and a["listed"] != a["digest"]:
        lines.append(f"  listed    DOES NOT MATCH: the record's files give {a['listed']}")
    if a.get("tree_checked"):
        verdict = "matches" if a.get("on_disk") == a["digest"] else f"DOES NOT MATCH ({a.get('on_disk')})"
        lines.append(f"  on disk   {verdict} the record")
    else:
        lines.append(f"  on disk   not checked: no tree at {a['location']}")
    return lines


def mismatches(report: Mapping[str, Any]) -> list[str]:
    out = [
        f"{kind}: {'; '.join(e.get('problems') or [])}"
        for kind, e in report["attestations"].items()
        if isinstance(e, dict) and e.get("status") == MISMATCH
    ]
    a = report["artifact"]
    if a.get("listed") and a["listed"] != a["digest"]:
        out.append(f"the record's tree digest {a['digest']} is not that of the files it lists ({a['listed']})")
    if a.get("tree_checked") and a.get("on_disk") != a["digest"]:
        out.append(f"the tree at {a['location']} has digest {a.get('on_disk')}, the record says {a['digest']}")
    elif a.get("record_matches") is False and a.get("kind") != "llvm-install-tree":
        out.append("the artifact does not match its record")
    return out
