"""The build and wheel records, read by hermetic's own record types (its one Python import here), and their summaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermetic.core.errors import HermeticError
from hermetic.model.record import BuildRecord, WheelRecord, load_build_record, load_wheel_record

from .core import StepFailed

__all__ = ["BuildRecord", "WheelRecord", "build_record", "llvm_summary", "variant_entry", "wheel_record", "wheel_summary"]


def build_record(path: Path) -> BuildRecord:
    try:
        return load_build_record(path)
    except HermeticError as exc:
        raise StepFailed(f"{exc.what}: {exc.why}") from exc


def wheel_record(path: Path) -> WheelRecord:
    try:
        return load_wheel_record(path)
    except HermeticError as exc:
        raise StepFailed(f"{exc.what}: {exc.why}") from exc


def llvm_summary(rec: BuildRecord) -> dict[str, Any]:
    """What the report says of an LLVM build (its record is copied beside the report)."""
    files = rec.tree.files
    return {
        "variant": rec.variant,
        "version": rec.recipe.version,
        "prefix": rec.prefix,
        "arch": rec.arch,
        "inputs_digest": rec.inputs_digest,
        "tree_digest": rec.tree.digest,
        "tree_size": rec.tree.size,
        "tree_entries": len(files),
        "tree_files": sum(1 for f in files if f.kind == "file"),
        "build_commands": rec.build_commands,
        "wall_time_s": rec.wall_time_s,
        "jobs": rec.jobs,
        "offline": rec.offline.as_json(),
        "toolchain": rec.toolchain.as_json() if rec.toolchain else None,
        "toolchain_id": rec.toolchain_ref.as_json(),
        "source_archive": rec.source_archive.as_json(),
        "test_package": rec.test_package.as_json(),
        "substituted": rec.substituted,
    }


def variant_entry(rec: BuildRecord, step_wall_s: float | None) -> dict[str, Any]:
    """Per built variant, the digests and times a reader compares across runs and machines."""
    return {rec.variant: {"tree_digest": rec.tree.digest, "inputs_digest": rec.inputs_digest,
                          "toolchain_id": rec.toolchain_ref.as_json(), "wall_time_s": rec.wall_time_s,
                          "step_wall_s": step_wall_s}}


def wheel_summary(path: Path, rec: WheelRecord, sha256: str) -> dict[str, Any]:
    return {
        "file": path.name,
        "sha256": sha256,
        "size": path.stat().st_size,
        "sha256_matches_record": rec.sha256 == sha256,
        "record": {
            "tag": rec.tag,
            "platform_tag": rec.platform_tag.as_json(),
            "glibc_required": rec.glibc_required,
            "symbol_versions": dict(rec.symbol_versions),
            "python": rec.python.as_json(),
            "llvm": rec.llvm.as_json(),
            "offline": rec.offline.as_json(),
            "timings_s": rec.timings_s.as_json(),
            "build_requirements": rec.build_requirements.as_json(),
            "toolchain_id": rec.toolchain_ref.as_json(),
        },
    }
