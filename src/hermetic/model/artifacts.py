"""What an artifact is, told from a path alone: the one place hermetic sniffs a layout, a wheel or a record.

Detection only reads files (a layout's marker and index, a file's first bytes,
a record's fields) and never judges them: a damaged layout is still an image
or a bundle, refused later by the reader that checks its digests, with the
verify exit code. What each command does with each kind is cli/artifacts.py's.
"""

from __future__ import annotations

import enum
import json
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermetic.core.errors import UsageError

LAYOUT_MARKER = "oci-layout"
WHEEL_RECORD = "wheel-record.json"
BUILD_RECORD = "record.json"
BUNDLE_ARTIFACT_TYPE = "application/vnd.hermetic.bundle.v1"
_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_DOCUMENT_LIMIT = 4 << 20  # an index or manifest this large is damaged: the image reader says so
_RECORD_LIMIT = 64 << 20


class Kind(enum.Enum):
    """The kinds of artifact hermetic inspects, attests and verifies; the value names a rebuild (verify/<kind>-…)."""

    LLVM = "llvm"  # a build record, record.json (its install tree is where it says)
    IMAGE = "image"  # an OCI image layout, one image or an index of several platforms
    WHEEL = "wheel"  # a .whl with its wheel-record.json beside it
    BUNDLE = "bundle"  # every input of a plan as one OCI artifact (`hermetic bundle`)


@dataclass(frozen=True)
class Artifact:
    kind: Kind
    path: Path  # what the kind's readers take: the layout, the wheel or its record, the record.json


def is_bundle_manifest(doc: object) -> bool:
    """Whether a manifest (from a layout or a registry) is a hermetic bundle's."""
    return isinstance(doc, dict) and doc.get("artifactType") == BUNDLE_ARTIFACT_TYPE


def _small_json(path: Path) -> Any:
    """A document no larger than the limit, or None when it is absent, too large or not JSON."""
    try:
        with open(path, "rb") as f:
            raw = f.read(_DOCUMENT_LIMIT + 1)
        return None if len(raw) > _DOCUMENT_LIMIT else json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None


def layout_kind(path: Path) -> Kind:
    """A layout holding one manifest of the bundle's artifactType is a bundle; every other layout an image."""
    index = _small_json(path / "index.json")
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list) or len(manifests) != 1 or not isinstance(manifests[0], dict):
        return Kind.IMAGE
    desc = manifests[0]
    digest = desc.get("digest")
    if desc.get("mediaType") != _OCI_MANIFEST or not isinstance(digest, str) or not digest.startswith("sha256:"):
        return Kind.IMAGE
    hexpart = digest.removeprefix("sha256:")
    if not hexpart.isalnum():  # never a path outside blobs/
        return Kind.IMAGE
    return Kind.BUNDLE if is_bundle_manifest(_small_json(path / "blobs" / "sha256" / hexpart)) else Kind.IMAGE


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # text too long for a path is no path
        return False


def detect(path: Path, verb: str, takes: str) -> Artifact | None:
    """The artifact at path; None when nothing is there (the caller may read the text as a reference).

    Anything else is refused with a UsageError saying what it is instead: "cannot VERB PATH: ...",
    `takes` (what the command takes) as the reason.
    """
    if not _exists(path):
        return None
    if path.is_dir():
        return _directory(path, verb, takes)
    return _file(path, verb, takes)


def _directory(path: Path, verb: str, takes: str) -> Artifact:
    if (path / LAYOUT_MARKER).is_file():
        return Artifact(layout_kind(path), path)
    if (path / WHEEL_RECORD).is_file():
        return Artifact(Kind.WHEEL, path)
    if (path / BUILD_RECORD).is_file():
        return _file(path / BUILD_RECORD, verb, takes)
    fix = "pass one of those"
    try:
        names = {p.name for p in path.iterdir()}
    except OSError as exc:
        raise UsageError(f"cannot {verb} {path}: it cannot be listed", str(exc), "check its permissions") from None
    if not names:
        why = "it is an empty directory"
    elif names & {"index.json", "blobs"}:
        why = "it holds index.json or blobs/ but no oci-layout file, so it is no whole OCI image layout"
        fix = "copy the layout whole again (`skopeo copy oci:SRC oci:DIR`, or `hermetic pull REF --layout DIR`)"
    else:
        why = f"it holds no {LAYOUT_MARKER}, {WHEEL_RECORD} or {BUILD_RECORD}"
    raise UsageError(f"cannot {verb} {path}: {why}", takes, fix)


def _file(path: Path, verb: str, takes: str) -> Artifact:
    if path.suffix == ".whl" or path.name == WHEEL_RECORD:
        return Artifact(Kind.WHEEL, path)
    if path.name in ("index.json", LAYOUT_MARKER) and (path.parent / LAYOUT_MARKER).is_file():
        raise UsageError(f"cannot {verb} {path}: it is a file of an OCI image layout", takes,
                         f"pass the layout directory: `hermetic {verb} {path.parent}`")
    refused = _not_json(path, verb, takes)
    if refused is not None:
        raise refused
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(_RECORD_LIMIT))
    except (ValueError, RecursionError):
        raise UsageError(f"cannot {verb} {path}: it is not JSON, so not a build record", takes,
                         "pass one of those") from None
    if isinstance(data, dict) and str(data.get("schema", "")).startswith("hermetic.wheel-record/"):
        return Artifact(Kind.WHEEL, path)  # a wheel record under another name
    if not isinstance(data, dict) or not {"variant", "tree"} <= data.keys():
        raise UsageError(f"cannot {verb} {path}: it is JSON but not an LLVM build record", takes,
                         "a build record is WORK_DIR/llvm/VARIANT/record.json, written by `hermetic build llvm`")
    return Artifact(Kind.LLVM, path)


def _not_json(path: Path, verb: str, takes: str) -> UsageError | None:
    """What an archive is, told before the JSON reader would only say "not JSON"."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as exc:
        return UsageError(f"cannot {verb} {path}: it cannot be read", str(exc), "check its permissions")
    if head[:2] == b"\x1f\x8b" or head[:4] == b"\x28\xb5\x2f\xfd" or head[:6] == b"\xfd7zXZ\x00":
        return UsageError(f"cannot {verb} {path}: it is a compressed file", takes,
                          f"if it holds an image layout, extract it (`tar -xf FILE -C DIR`) and {verb} DIR")
    if zipfile.is_zipfile(path):
        return UsageError(f"cannot {verb} {path}: it is a zip archive, not a wheel", takes,
                          f"a wheel's name ends in .whl, with its {WHEEL_RECORD} beside it (written by `hermetic wheel`)")
    if tarfile.is_tarfile(path):
        return UsageError(
            f"cannot {verb} {path}: it is a tar archive", takes,
            f"an OCI layout in a tar: `tar -xf FILE -C DIR`, then `hermetic {verb} DIR`; "
            f"a `docker save` archive: `skopeo copy docker-archive:FILE oci:DIR`, then `hermetic {verb} DIR`",
        )
    return None
