"""CycloneDX 1.6, the format of hermetic's SBOMs: the document, the shapes its components share, reading one back.

sbom.py builds the SBOMs of images and wheels from their build records; what it shares with the provenance
(provenance.py: where a copy came from, a tool's version, a pinned toolchain wheel's purl) is here, below
both, and reads no record.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hermetic import __version__
from hermetic.attest import licences
from hermetic.core import times

SPEC_VERSION = "1.6"
SCHEMA_URL = "http://cyclonedx.org/schema/bom-1.6.schema.json"
MEDIA_TYPE = "application/vnd.cyclonedx+json"
PROP = "hermetic:"
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



def origin_uri(origin: str, canonical: str = "") -> str:
    """A URI for where a copy came from: `url:X` → X, `apt:pkg=ver` → a Debian source purl."""
    kind, _, rest = origin.partition(":")
    if kind == "url" and rest:
        return rest
    if kind == "apt" and rest:
        pkg, _, ver = rest.partition("=")
        return f"pkg:deb/debian/{pkg}@{ver}?arch=source" if ver else f"pkg:deb/debian/{pkg}?arch=source"
    return canonical



def props(pairs: Iterable[tuple[str, Any]]) -> list[dict[str, str]]:
    return [{"name": PROP + k, "value": str(v)} for k, v in pairs if v is not None and v != ""]



def sha256_hash(hexdigest: str) -> list[dict[str, str]]:
    return [{"alg": "SHA-256", "content": hexdigest.removeprefix("sha256:")}]



def license_of(expression: str) -> list[dict[str, str]]:
    return [{"expression": expression}]



def serial_number(subject_digest: str) -> str:
    return f"urn:uuid:{uuid.uuid5(_SERIAL_NS, subject_digest)}"



def new_bom(subject: dict[str, Any], subject_digest: str, epoch: int) -> dict[str, Any]:

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



def _licensed(expression: str, source: str) -> dict[str, Any]:
    """A component's `licenses`, and a property saying where the expression was read."""
    return {"licenses": license_of(expression), "properties": props([("license.source", source)])}



def with_licence(component: dict[str, Any], found: licences.Found) -> dict[str, Any]:
    extra = _licensed(found.expression, found.source)
    component["licenses"] = extra["licenses"]
    component["properties"] = [*(component.get("properties") or []), *extra["properties"]]
    return component



def toolchain_components(toolchain: Mapping[str, Any], prefix: str, kind: str = "host") -> list[dict[str, Any]]:
    out = []
    for name in ("cc", "cxx", "cmake", "ninja", "conan", "python"):
        line = str(toolchain.get(name, "") or "")
        if not line:
            continue
        comp = {"type": "application", "bom-ref": f"{prefix}tool:{name}", "name": name,
                "version": tool_version(line), "description": line}
        found = licences.of_compiler(line, kind) if name in ("cc", "cxx") else licences.of_package(name)
        out.append(with_licence(comp, found))
    return out



class PinnedWheel(Protocol):
    """A pinned toolchain wheel as a record names it (model.record's ToolchainRef)."""

    @property
    def name(self) -> str: ...

    @property
    def file(self) -> str: ...

    @property
    def version(self) -> str: ...


def toolchain_package(tc: PinnedWheel) -> tuple[str, str]:
    """The PyPI project and version of a pinned toolchain wheel: `ziglang-0.17.1-py3-…whl` → (ziglang, 0.17.1)."""
    parts = tc.file.split("-")
    return (parts[0] if len(parts) > 1 else tc.name), (tc.version or (parts[1] if len(parts) > 1 else ""))



def toolchain_purl(tc: PinnedWheel) -> str:
    package, version = toolchain_package(tc)
    return f"pkg:pypi/{package}@{version}"



def runtime_components(kind: str, compiler_line: str, prefix: str) -> list[dict[str, Any]]:
    """What the compiler links into every binary it makes: its runtime libraries, the C library's start files."""
    return [
        with_licence(
            {"type": "library", "bom-ref": f"{prefix}runtime:{i}", "name": part["name"],
             "description": f"linked into the binaries by the {kind if kind != 'host' else 'host'} compiler"},
            licences.Found(part["expression"], f"pinned: {part['from']}"),
        )
        for i, part in enumerate(licences.runtime_parts(kind, compiler_line))
    ]




def unique_components(components: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
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
