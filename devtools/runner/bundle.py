"""The bundle the runner builds from (`--bundle DIR`): its index read from the OCI layout, its pruned source taken out."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core import StepFailed
from .facts import file_sha256

ARTIFACT_TYPE = "application/vnd.hermetic.bundle.v1"


@dataclass(frozen=True)
class Bundle:
    """What the report says of a bundle, and where its pruned source lies in it."""

    path: Path
    name: str
    digest: str  # the manifest's: the bundle's identity
    variant: str  # the variant its plan was made for
    build_inputs_digest: str | None  # the plan's build step's
    inputs: int
    size: int
    pruned: dict[str, Any]  # the index's entries of the pruned archive and its pruned.json
    pruned_meta: dict[str, Any]

    def blob(self, entry: dict[str, Any]) -> Path:
        return self.path / "blobs" / "sha256" / str(entry["sha256"])

    def as_json(self) -> dict[str, Any]:
        return {"dir": str(self.path), "name": self.name, "manifest_digest": self.digest, "variant": self.variant,
                "plan_build_inputs_digest": self.build_inputs_digest, "inputs": self.inputs, "size": self.size,
                "pruned": {"file": self.pruned["name"], "sha256": self.pruned["sha256"]}}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StepFailed(f"cannot read {path}: {type(exc).__name__}: {exc}") from None


def read(path: Path) -> Bundle:
    """The bundle's index and plan (read only: hermetic checks every blob when it opens the bundle)."""
    index = _json(path / "index.json")
    roots = [m for m in index.get("manifests") or [] if isinstance(m, dict)]
    if len(roots) != 1 or not str(roots[0].get("digest", "")).startswith("sha256:"):
        raise StepFailed(f"{path} is not a bundle: its index.json lists {len(roots)} manifests, a bundle one")
    digest = roots[0]["digest"]
    manifest = _json(path / "blobs" / "sha256" / digest[7:])
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise StepFailed(f"{path} is not a bundle: its artifactType is {manifest.get('artifactType')!r}")
    entries = _json(path / "blobs" / "sha256" / manifest["config"]["digest"][7:]).get("entries") or []
    by_role: dict[str, dict[str, Any]] = {}
    for e in entries:
        by_role.setdefault(e["role"], e)
    missing = [r for r in ("plan", "pruned", "pruned-meta") if r not in by_role]
    if missing:
        raise StepFailed(f"the bundle {path} has no {', '.join(missing)} entry: `hermetic bundle` writes them")
    plan = _json(path / "blobs" / "sha256" / by_role["plan"]["sha256"])
    build: dict[str, Any] = next((s for s in plan.get("steps") or [] if s.get("key") == "build"), {})
    return Bundle(path, str(manifest.get("annotations", {}).get("org.opencontainers.image.title", "")), digest,
                  str(plan.get("variant", "")), build.get("inputs_digest"), len(entries),
                  sum(int(e["size"]) for e in entries), by_role["pruned"], by_role["pruned-meta"])


def take_source(b: Bundle, dest: Path) -> Path:
    """The bundle's pruned archive with its pruned.json beside it, copied into dest and checked by sha256: the
    source of the variants the bundle was not made for (`support` builds from the nvptx subset)."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry, name in ((b.pruned, b.pruned["name"]), (b.pruned_meta, "pruned.json")):
        target, tmp = dest / name, dest / f".{name}.partial"
        shutil.copyfile(b.blob(entry), tmp)
        got = file_sha256(tmp)
        if got != entry["sha256"]:
            tmp.unlink()
            raise StepFailed(f"the bundle's {entry['role']} {entry['name']} is damaged: sha256 {got}, "
                             f"its index says {entry['sha256']}")
        os.replace(tmp, target)
    return dest / str(b.pruned["name"])
