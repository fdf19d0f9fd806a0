"""What the report says of the machine, its tools, the carried source and the gpu tier; a missing fact never fails it."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def sh(argv: list[str], env: dict[str, str] | None = None, timeout: int = 60) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout or proc.stderr).strip() if proc.returncode == 0 else None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def first_line(text: str | None) -> str | None:
    return text.splitlines()[0].strip() if text else None


def gpus() -> list[dict[str, str]]:
    """The CUDA devices nvidia-smi lists (none where it is missing or sees none)."""
    q = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"])
    out = []
    for line in (q or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            out.append({"name": parts[0], "driver": parts[1], "memory": parts[2], "compute_capability": parts[3]})
    return out


def machine() -> dict[str, Any]:
    out: dict[str, Any] = {"cpus": os.cpu_count(), "kernel": platform.release(), "arch": platform.machine()}
    try:
        rel = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        out["os"] = rel.get("PRETTY_NAME", "").strip('"')
    except OSError:
        out["os"] = None
    found = gpus()
    out |= {"gpus": found, "gpu": found[0]["name"] if found else None, "driver": found[0]["driver"] if found else None}
    m = re.search(r"CUDA Version:\s*([0-9.]+)", sh(["nvidia-smi"]) or "")
    out["cuda_driver_api"] = m.group(1) if m else None
    return out


def here_arch() -> str:
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def offline_mode() -> tuple[str, str | None]:
    """`require` where this machine can make a network namespace, else `auto` and why."""
    for argv in (["unshare", "--net", "--", "true"], ["unshare", "--user", "--map-root-user", "--net", "--", "true"]):
        if sh(argv) is not None:
            return "require", None
    return "auto", "this machine cannot create a network namespace (unshare --net failed); built with --offline auto"


def source(path: Path | None) -> dict[str, Any]:
    """The carried archive: its size and sha256, and whether its pruned.json vouches for it."""
    out: dict[str, Any] = {"path": str(path) if path else None, "file": path.name if path else None}
    if path is None or not path.is_file():
        return out | {"missing": True}
    out |= {"size": path.stat().st_size, "sha256": file_sha256(path)}
    meta = path.with_name("pruned.json")
    if meta.is_file():
        pj = json.loads(meta.read_text())
        out |= {"pruned_json_sha256": pj.get("sha256"), "matches_pruned_json": pj.get("sha256") == out["sha256"],
                "from": pj.get("from")}
    return out


def mirror_slim(mirror: Path | None) -> dict[str, Any] | None:
    """The slim zig archive's slim.json (`hermetic toolchain slim --output .zig` writes it), if carried."""
    meta = mirror / "slim.json" if mirror else None
    if meta is None or not meta.is_file():
        return None
    try:
        data = json.loads(meta.read_text())
    except ValueError:
        return None
    return {k: data.get(k) for k in ("file", "sha256", "size")}


def unpacked_toolchains(cache: Path) -> list[dict[str, Any]]:
    """Where each unpacked toolchain tree came from (the wheel or its slim archive)."""
    out = []
    for mark in sorted((cache / "toolchains" / "unpacked").glob("*/.hermetic-unpacked.json")):
        try:
            data = json.loads(mark.read_text())
        except (OSError, ValueError):
            continue
        out.append({"dir": mark.parent.name, "tree": data.get("tree"), "wheel_sha256": data.get("sha256"),
                    "from": data.get("from")})
    return out


def tool_versions(python: str, env: dict[str, str], ptxas: Path | None) -> dict[str, Any]:
    return {
        "hermetic": first_line(sh([python, "-m", "hermetic", "--version"], env=env)),
        "conan": first_line(sh([python, "-m", "conans.conan", "--version"], env=env)),
        "cmake": first_line(sh(["cmake", "--version"])),
        "ninja": first_line(sh(["ninja", "--version"])),
        "gcc": first_line(sh(["gcc", "--version"])),
        "gxx": first_line(sh(["g++", "--version"])),
        "ptxas": (sh([str(ptxas), "--version"]) or "").splitlines()[-2:] or None if ptxas else None,
        "nvcc": (sh(["nvcc", "--version"]) or "").splitlines()[-2:] or None if shutil.which("nvcc") else None,
    }


def probe(python: Path | str, probe_script: Path, *modules: str) -> dict[str, Any]:
    """tests/gpu/runner/venv_probe.py run by `python` from / without PYTHONPATH: what that interpreter imports."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    text = sh([str(python), str(probe_script), *modules], env=env)
    try:
        return dict(json.loads(text.splitlines()[-1])) if text else {}
    except json.JSONDecodeError:
        return {}


def junit(path: Path) -> dict[str, Any] | None:
    """The gpu tier's results: counts, the failing tests, every skip with its reason."""
    if not path.is_file():
        return None
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failing: list[str] = []
    skipped: list[dict[str, str]] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            counts["failed" if "failure" in kinds else "errors"] += 1
            failing.append(name)
        elif "skipped" in kinds:
            counts["skipped"] += 1
            el = case.find("skipped")
            skipped.append({"test": name, "reason": (el.get("message") if el is not None else "") or ""})
        else:
            counts["passed"] += 1
    return {"total": sum(counts.values()), **counts, "failing": failing, "skipped_tests": skipped}
