"""Validate documents against the vendored CycloneDX 1.6 schema, offline (see cyclonedx-1.6/README.md)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

HERE = Path(__file__).resolve().parent / "cyclonedx-1.6"
BASE = "http://cyclonedx.org/schema/"
FILES = ("bom-1.6.SNAPSHOT.schema.json", "spdx.SNAPSHOT.schema.json", "jsf-0.82.SNAPSHOT.schema.json")


@functools.cache
def validator() -> Draft7Validator:
    pairs = []
    for name in FILES:
        doc = json.loads((HERE / name).read_text())
        res = Resource.from_contents(doc, default_specification=DRAFT7)
        # under its own $id and under the name the bom schema's relative $ref resolves to
        pairs += [(doc["$id"], res), (BASE + name, res)]
    schema = json.loads((HERE / FILES[0]).read_text())
    return Draft7Validator(schema, registry=Registry().with_resources(pairs), format_checker=Draft7Validator.FORMAT_CHECKER)


def errors(doc: Any) -> list[str]:
    """Every schema violation, as `path: message`; empty when the document is valid CycloneDX 1.6."""
    out = []
    for e in sorted(validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        out.append(f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}")
    return out
