"""A built tree (and its test_package PTX) against its entry in tests/golden/digests.json, measured elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .records import BuildRecord

MATCH, DIFFERS, NO_ENTRY, OTHER_TOOLCHAIN = "match", "differs", "no entry", "other toolchain"


def entry_name(rec: BuildRecord, version_given: bool, arch: str) -> str:
    """The golden entry's name: llvm-support-zig-amd64, llvm-support-22.1.8-zig-amd64 (a release asked for by name)."""
    release = f"-{rec.recipe.version}" if version_given else ""
    return f"{rec.recipe.name}-{rec.variant}{release}-{rec.toolchain_ref.name}-{rec.arch or arch}"


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    digests = data.get("digests") if isinstance(data, dict) else None
    if not isinstance(digests, dict):
        raise ValueError(f"{path} has no `digests` mapping")
    return digests


def compare(rec: BuildRecord, golden: dict[str, Any], version_given: bool, arch: str) -> dict[str, Any]:
    """status: match, differs (the tree or a PTX file), no entry (nothing measured elsewhere to compare with), or
    other toolchain (the entry was measured with another pin of the toolchain: not comparable)."""
    name = entry_name(rec, version_given, arch)
    out: dict[str, Any] = {"entry": name, "tree": rec.tree.digest}
    want = golden.get(name)
    if not isinstance(want, dict):
        return out | {"status": NO_ENTRY}
    out["expected"] = want.get("tree")
    theirs, ours = want.get("toolchain_id"), rec.toolchain_ref.as_json()
    if theirs is not None and theirs != ours:
        return out | {"status": OTHER_TOOLCHAIN, "expected_toolchain_id": theirs}
    ptx_want: dict[str, str] = want.get("test_package_ptx") or {}
    ptx_got = {p.file: p.sha256 for p in rec.test_package.ptx}
    out["ptx"] = {f: {"expected": sha, "got": ptx_got.get(f), "match": ptx_got.get(f) == sha} for f, sha in ptx_want.items()}
    same = want.get("tree") == rec.tree.digest and all(p["match"] for p in out["ptx"].values())
    return out | {"status": MATCH if same else DIFFERS}
