"""Attest artifacts: write the SBOM and provenance of an image layout or a wheel.

For an image they go into the layout as OCI referrers (oci/referrers.py), so
`hermetic push` takes them along and the image digest stays what it was; for
a wheel they are files beside it: `<wheel>.cdx.json` and `<wheel>.intoto.json`.
The facts come from the build records; nothing is guessed from the machine
except, for a wheel whose record predates it, the compiler version (marked
as detected at attestation time).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermetic.attest import provenance, sbom, signing
from hermetic.build import buildenv
from hermetic.core import times
from hermetic.core.digests import file_sha256
from hermetic.core.errors import UsageError, VerifyError
from hermetic.model import recipe, record, requirements
from hermetic.model.artifacts import WHEEL_RECORD
from hermetic.oci import referrers
from hermetic.oci.layout import Layout, pick_root, select_manifest
from hermetic.oci.types import Descriptor

if TYPE_CHECKING:
    from hermetic.model.settings import Settings

SBOM_SUFFIX = ".cdx.json"
PROVENANCE_SUFFIX = ".intoto.json"
KIND_SBOM = "sbom"
KIND_PROVENANCE = "provenance"
KIND_BUILD_RECORD = "build-record"
KIND_SBOM_DSSE = "sbom.dsse"
KIND_PROVENANCE_DSSE = "provenance.dsse"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"
SBOM_DSSE_SUFFIX = ".cdx.dsse.json"
PROVENANCE_DSSE_SUFFIX = ".intoto.dsse.json"
LABEL = "io.hermetic."


# -- signed statements -----------------------------------------------------------------------------------


def sbom_statement(bom: dict[str, Any], name: str, sha256: str) -> dict[str, Any]:
    """The SBOM as the predicate of an in-toto Statement about the artifact, what a DSSE envelope signs."""
    return {"_type": provenance.STATEMENT_TYPE, "subject": [{"name": name, "digest": {"sha256": sha256}}],
            "predicateType": CYCLONEDX_PREDICATE, "predicate": bom}


def signing_key(settings: Settings) -> signing.SigningKey | None:
    return signing.load_signing_key(settings.sign_key)


def signing_note(key: signing.SigningKey | None) -> dict[str, Any]:
    """What the provenance says about its own signing: by which key, or that nothing was signed and why."""
    if key is None:
        return {"signed": False, "why": "no signing key was given (--sign-key, HERMETIC_SIGNING_KEY_FILE)"}
    return {"signed": True, "keyid": key.keyid, "format": "DSSE (in-toto Statement v1), " + signing.SCHEME}


def envelope(key: signing.SigningKey, statement: dict[str, Any]) -> bytes:
    """A DSSE envelope of the statement's exact bytes (the same bytes as the unsigned document beside it)."""
    return signing.dsse_bytes(signing.dsse_sign(key, provenance.dumps(statement)))


# -- images ----------------------------------------------------------------------------------------------


def facts_of(
    name: str, manifest: Descriptor, doc: dict[str, Any], config_digest: str, config: dict[str, Any]
) -> sbom.ImageFacts:
    """ImageFacts from an image manifest and its config, wherever they were read from."""
    labels = {str(k): str(v) for k, v in ((config.get("config") or {}).get("Labels") or {}).items()}
    layers = tuple(
        (d.media_type, d.digest, d.size)
        for d in (Descriptor.from_json(x, manifest.digest) for x in doc.get("layers") or [])
    )
    return sbom.ImageFacts(
        name=name or labels.get("org.opencontainers.image.title", "image"),
        title=labels.get("org.opencontainers.image.title", name),
        manifest_digest=manifest.digest,
        manifest_size=manifest.size,
        media_type=manifest.media_type,
        config_digest=config_digest,
        layers=layers,
        arch=str(config.get("architecture", "")),
        os=str(config.get("os", "")),
        labels=labels,
    )


def image_facts(layout: Layout, arch: str | None = None) -> tuple[sbom.ImageFacts, Descriptor]:
    """What the layout's image is: name, digests, platform and labels; and its manifest descriptor."""
    root = pick_root(layout)
    manifest = select_manifest(layout, root, arch)
    doc = layout.read_json(manifest)
    config_desc = Descriptor.from_json(doc.get("config"), manifest.digest)
    config = layout.read_json(config_desc)
    name = manifest.ref_name or root.ref_name
    facts = facts_of(name, manifest, doc, config_desc.digest, config)
    return facts, Descriptor(manifest.media_type, manifest.digest, manifest.size)


def record_for_image(facts: sbom.ImageFacts, work_dir: Path) -> Path:
    """The build record of the tree in the image: WORK_DIR/llvm/<variant>/record.json, if its tree digest matches."""
    variant = facts.labels.get(LABEL + "variant", "")
    # the default release's build directory is the variant's name; another release's has its version too
    # (recipe.Recipe.build_name)
    version = facts.labels.get("org.opencontainers.image.version", "")
    name = facts.labels.get(LABEL + "recipe", "llvm")
    path = work_dir / name / variant / "record.json"
    if version and not (path.is_file() and record.load_build_record(path).recipe.version == version):
        path = work_dir / name / f"{variant}-{version}" / "record.json"
    want = facts.labels.get(LABEL + "tree.digest", "")
    if variant and path.is_file():
        rec = record.load_build_record(path)
        if rec.tree.digest == want:
            return path
        why = f"{path} records tree {rec.tree.digest}, the image holds {want}"
    else:
        why = f"there is no {path}"
    raise UsageError(
        f"cannot find the build record of {facts.name}",
        why,
        "pass --record PATH (the record.json of the build the image was written from), or --work-dir of that build",
    )


def build_times(rec: record.BuildRecord | record.WheelRecord, path: Path, total_s: float | None) -> tuple[float, float]:
    """Start and finish of the build: from the record when it has them, else its mtime and wall time."""
    if rec.started and rec.finished:
        return times.parse_iso(rec.started), times.parse_iso(rec.finished)
    finished = path.stat().st_mtime
    return finished - float(total_s or 0.0), finished


def _canonical(settings: Settings) -> dict[str, str]:
    try:
        return sbom.canonical_uris(recipe.load_at(settings.llvm_recipe_dir, settings.llvm_version, settings.root))
    except Exception:  # the URIs are a nicety; an SBOM without them is still right
        return {}


def attest_image(
    settings: Settings,
    layout_path: Path,
    record_path: Path,
    *,
    finished: float | None = None,
    builder_id: str = provenance.DEFAULT_BUILDER_ID,
    arch: str | None = None,
) -> list[referrers.Referrer]:
    """Write the image's SBOM, provenance and build record into its layout as referrers.

    The build record goes along byte for byte (the provenance names its sha256), so that a machine
    substituting this image for a build of its own can write the record of the tree it unpacked.
    """
    layout = Layout(layout_path)
    facts, subject = image_facts(layout, arch)
    rec = record.load_build_record(record_path)
    want = facts.labels.get(LABEL + "tree.digest", "")
    if want and rec.tree.digest != want:
        raise VerifyError(
            f"{record_path} is not the record of {facts.name}",
            f"it records tree {rec.tree.digest}, the image holds {want}",
            "pass the record.json of the build the image was written from",
        )
    canonical = _canonical(settings)
    bom = sbom.image_sbom(rec, facts, canonical)
    started, built = build_times(rec, record_path, rec.wall_time_s)
    if finished is None:
        finished = max(built, (layout.path / "index.json").stat().st_mtime)
    key = signing_key(settings)
    statement = provenance.image_statement(
        rec, facts, canonical, started=started, finished=finished,
        record_sha256=file_sha256(record_path), builder_id=builder_id, signing=signing_note(key),
    )
    epoch = rec.source_date_epoch
    out = [
        referrers.attach(
            layout, subject, sbom.MEDIA_TYPE, sbom.dumps(bom), "sbom.cdx.json",
            {referrers.ANN_KIND: KIND_SBOM, referrers.ANN_CREATED: times.iso(epoch)},
        ),
        referrers.attach(
            layout, subject, provenance.MEDIA_TYPE, provenance.dumps(statement), "provenance.intoto.json",
            {
                referrers.ANN_KIND: KIND_PROVENANCE,
                referrers.ANN_CREATED: statement["predicate"]["runDetails"]["metadata"]["finishedOn"],
                referrers.ANN_PREDICATE: provenance.PREDICATE_TYPE,
            },
        ),
        referrers.attach(
            layout, subject, record.RECORD_MEDIA_TYPE, record_path.read_bytes(), "record.json",
            {referrers.ANN_KIND: KIND_BUILD_RECORD, referrers.ANN_CREATED: statement["predicate"]["runDetails"]["metadata"]["finishedOn"]},
        ),
    ]
    if key is not None:
        out += _attach_signed(layout, subject, facts, key, bom, statement, epoch)
    return out


def _attach_signed(
    layout: Layout, subject: Descriptor, facts: sbom.ImageFacts, key: signing.SigningKey, bom: dict[str, Any],
    statement: dict[str, Any], epoch: int,
) -> list[referrers.Referrer]:
    """The DSSE envelopes of the SBOM and the provenance, beside the unsigned documents."""
    digest = facts.manifest_digest.removeprefix("sha256:")
    return [
        referrers.attach(
            layout, subject, DSSE_MEDIA_TYPE, envelope(key, doc), name,
            {referrers.ANN_KIND: kind, referrers.ANN_CREATED: times.iso(epoch), referrers.ANN_PREDICATE: predicate},
        )
        for kind, doc, predicate, name in (
            (KIND_SBOM_DSSE, sbom_statement(bom, facts.name, digest), CYCLONEDX_PREDICATE, "sbom.cdx.dsse.json"),
            (KIND_PROVENANCE_DSSE, statement, provenance.PREDICATE_TYPE, "provenance.intoto.dsse.json"),
        )
    ]


# -- wheels ----------------------------------------------------------------------------------------------


def sidecars(wheel: Path) -> tuple[Path, Path]:
    return wheel.with_name(wheel.name + SBOM_SUFFIX), wheel.with_name(wheel.name + PROVENANCE_SUFFIX)


def signed_sidecars(wheel: Path) -> tuple[Path, Path]:
    """The DSSE envelopes of the SBOM and the provenance: `<wheel>.cdx.dsse.json`, `<wheel>.intoto.dsse.json`."""
    return wheel.with_name(wheel.name + SBOM_DSSE_SUFFIX), wheel.with_name(wheel.name + PROVENANCE_DSSE_SUFFIX)


def wheel_license(wheel: Path) -> str:
    """The SPDX expression the wheel's METADATA declares ('' when it declares none)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = z.read(meta).decode(errors="replace") if meta else ""
    except (OSError, zipfile.BadZipFile):
        return ""
    headers = HeaderParser().parsestr(text)
    return str(headers.get("License-Expression") or headers.get("License") or "").strip()


@dataclass(frozen=True)
class WheelArtifact:
    wheel: Path
    record_path: Path
    record: record.WheelRecord


def find_wheel(path: Path) -> WheelArtifact:
    """A wheel and its wheel-record.json, from either of them."""
    if path.is_dir():
        path = path / WHEEL_RECORD
    if path.suffix == ".whl":
        rec_path = path.with_name(WHEEL_RECORD)
    else:
        rec_path = path
    try:
        data = json.loads(rec_path.read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"no {WHEEL_RECORD} beside {path}", "hermetic wheel writes it next to the wheel",
                         "build the wheel with `hermetic wheel`") from exc
    except ValueError as exc:
        raise VerifyError(f"{rec_path} is not valid JSON", str(exc), "build the wheel again") from exc
    rec = record.WheelRecord.from_json(data, str(rec_path))
    wheel = path if path.suffix == ".whl" else rec_path.with_name(rec.wheel)
    if wheel.name != rec.wheel:
        raise UsageError(f"{rec_path} records {rec.wheel}, not {wheel.name}", "", "pass the record of this wheel")
    return WheelArtifact(wheel, rec_path, rec)


def llvm_origin(prefix: Path) -> sbom.LLVMOrigin | None:
    """The distribution package an LLVM prefix belongs to (Debian's llvm-19-dev), if dpkg knows it."""
    probe = prefix / "lib" / "cmake" / "llvm" / "LLVMConfig.cmake"
    try:
        owner = subprocess.run(["dpkg-query", "-S", str(probe)], capture_output=True, text=True, timeout=30)
        if owner.returncode != 0:
            return None
        package = owner.stdout.split(":", 1)[0].strip()
        info = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}\t${source:Package}\t${Architecture}", package],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if info.returncode != 0 or info.stdout.count("\t") != 2:
        return None
    version, source, arch = info.stdout.split("\t")
    return sbom.LLVMOrigin(package, version, arch.strip(), source)


def _llvm_record_of(wrec: record.WheelRecord) -> record.BuildRecord | None:
    ref = wrec.llvm.record
    path = Path(ref.path) if ref and ref.path else None
    if ref is None or path is None or not path.is_file():
        return None
    rec = record.load_build_record(path)
    return rec if rec.tree.digest == ref.tree_digest else None


def _wheel_toolchain(wrec: record.WheelRecord) -> record.ToolchainVersions:
    if wrec.toolchain:
        return wrec.toolchain
    from hermetic.build import sandbox

    found = record.ToolchainVersions.from_mapping(buildenv.toolchain_versions(sandbox.build_env(wrec.source_date_epoch)))
    return dataclasses.replace(found, detected_at="attestation (the wheel record does not name its compiler)")


def _metadata_text(path: Path) -> str:
    """The METADATA of a wheel or the PKG-INFO of an sdist ('' when unreadable)."""
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as z:
                name = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
                return z.read(name).decode(errors="replace") if name else ""
        with tarfile.open(path) as t:
            member = next((m for m in t.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")), None)
            f = t.extractfile(member) if member else None
            return f.read().decode(errors="replace") if f else ""
    except (OSError, zipfile.BadZipFile, tarfile.TarError):
        return ""


def build_metadata(settings: Settings, wrec: record.WheelRecord) -> dict[str, str]:
    """The own metadata of the wheelhouse entries and the sdist a wheel was built from, where they are here.

    Only files with a sha256 the record pins count: a licence is read from the very file that was built with.
    """

    pinned = {p.name.lower().replace("_", "-"): set(p.sha256) for p in wrec.build_requirements.pinned}
    out: dict[str, str] = {}
    dirs = {Path(wrec.wheelhouse)} if wrec.wheelhouse else set()
    for d in {*dirs, settings.wheelhouse_dir}:
        for whl in sorted(d.glob("*.whl")) if d.is_dir() else []:
            project = requirements.wheel_project(whl.name)
            if project and project[0] in pinned and project[0] not in out and file_sha256(whl) in pinned[project[0]]:
                out[project[0]] = _metadata_text(whl)
    sd = wrec.project.sdist
    if sd is not None:
        path = settings.cache_dir / "sdists" / "sha256" / sd.sha256 / sd.file
        if path.is_file() and file_sha256(path) == sd.sha256:
            out[sd.name.lower()] = _metadata_text(path)
    return out


def wheel_documents(
    settings: Settings, art: WheelArtifact, builder_id: str = provenance.DEFAULT_BUILDER_ID
) -> tuple[dict[str, Any], dict[str, Any]]:
    wrec = art.record
    llvm_rec = _llvm_record_of(wrec)
    prefix = Path(wrec.llvm.prefix)
    origin = None if llvm_rec is not None else llvm_origin(prefix)
    canonical = _canonical(settings)
    chain = _wheel_toolchain(wrec)
    bom = sbom.wheel_sbom(
        wrec, license_expression=wheel_license(art.wheel), llvm_record=llvm_rec, llvm_origin=origin,
        canonical=canonical, toolchain=chain, metadata=build_metadata(settings, wrec),
    )
    started, finished = build_times(wrec, art.record_path, wrec.timings_s.total)
    statement = provenance.wheel_statement(
        wrec, llvm_record=llvm_rec, canonical=canonical, started=started, finished=finished,
        record_sha256=file_sha256(art.record_path), toolchain=chain, builder_id=builder_id,
        signing=signing_note(signing_key(settings)),
    )
    return bom, statement


def attest_wheel(
    settings: Settings, path: Path, builder_id: str = provenance.DEFAULT_BUILDER_ID
) -> tuple[Path, Path]:
    """Write `<wheel>.cdx.json` and `<wheel>.intoto.json` beside the wheel."""
    art = find_wheel(path)
    if not art.wheel.is_file():
        raise UsageError(f"{art.wheel} does not exist", f"{art.record_path} names it", "build the wheel again")
    actual = file_sha256(art.wheel)
    if actual != art.record.sha256:
        raise VerifyError(
            f"{art.wheel.name} does not match its record",
            f"sha256 {actual}, {art.record_path} says {art.record.sha256}",
            "rebuild the wheel, or pass the record written with it",
        )
    bom, statement = wheel_documents(settings, art, builder_id)
    sbom_path, prov_path = sidecars(art.wheel)
    files = [(sbom_path, sbom.dumps(bom)), (prov_path, provenance.dumps(statement))]
    key = signing_key(settings)
    signed = signed_sidecars(art.wheel)
    if key is not None:
        files += [(signed[0], envelope(key, sbom_statement(bom, art.wheel.name, actual))),
                  (signed[1], envelope(key, statement))]
    else:
        for old in signed:  # an envelope of earlier documents would no longer match them
            old.unlink(missing_ok=True)
    for p, data in files:
        tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, p)
    return sbom_path, prov_path
