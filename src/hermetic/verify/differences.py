"""What differs between two builds of an artifact: hermetic's own listings of tars, zips and JSON files,
and diffoscope's report of the content."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SHOWN_FILES = 10
DIFF_LINES = 12




def layer_listing(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    with tarfile.open(path, "r:*") as tar:
        for info in tar:
            digest = ""
            if info.isfile():
                f = tar.extractfile(info)
                digest = hashlib.sha256(f.read() if f else b"").hexdigest()
            out[info.name] = (
                f"type={info.type!r} mode={info.mode:04o} uid={info.uid} gid={info.gid} mtime={info.mtime} "
                f"size={info.size} link={info.linkname} sha256={digest}"
            )
    return out


def zip_listing(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            digest = hashlib.sha256(z.read(info)).hexdigest()
            out[info.filename] = (
                f"date={info.date_time} mode={info.external_attr >> 16:o} compress={info.compress_type} sha256={digest}"
            )
        order = [i.filename for i in z.infolist()]
    out["(entry order)"] = hashlib.sha256("\n".join(order).encode()).hexdigest()
    return out


def listing_differences(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    diffs = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None:
            diffs.append(f"unexpected: {name}")
        elif b is None:
            diffs.append(f"missing: {name}")
        elif a != b:
            fa, fb = dict(x.split("=", 1) for x in a.split(" ") if "=" in x), dict(x.split("=", 1) for x in b.split(" ") if "=" in x)
            what = [k for k in fa if fa.get(k) != fb.get(k)] or ["value"]
            diffs.append(f"differs ({', '.join(what)}): {name}")
    return diffs


def json_differences(pair: tuple[Path, Path]) -> list[str]:
    out = []
    for name in ("config.json", "manifest.json"):
        a, b = (pair[0] / name).read_bytes(), (pair[1] / name).read_bytes()
        if a != b:
            out.append(f"differs (content): {name}")
    return out



# -- diffoscope ----------------------------------------------------------------------------------------------


def run_diffoscope(old: Path, new: Path, out_dir: Path, timeout: float = 900) -> dict[str, Any]:
    """diffoscope on two outputs: a text report, a JSON report, and the first differing files with their diffs."""
    exe = shutil.which("diffoscope")
    if exe is None:
        return {"ran": False, "why": "diffoscope is not installed (apt-get install --no-install-recommends diffoscope-minimal)"}
    if not old.exists():
        return {"ran": False, "why": f"the original {old} is not on this machine; compare the listings above"}
    out_dir.mkdir(parents=True, exist_ok=True)
    text, js = out_dir / "diffoscope.txt", out_dir / "diffoscope.json"
    argv = [exe, "--no-progress", "--exclude-directory-metadata=yes", "--text", str(text), "--json", str(js), str(old), str(new)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return {"ran": False, "why": f"diffoscope took longer than {timeout:.0f}s", "command": argv}
    if proc.returncode not in (0, 1):
        return {"ran": False, "why": f"diffoscope failed ({proc.returncode}): {proc.stderr.strip()[-500:]}"}
    files: list[dict[str, str]] = []
    if js.is_file() and js.stat().st_size:
        _leaves(json.loads(js.read_text()), None, files, str(old), str(new))
    summary = (
        "no differences in content" if proc.returncode == 0
        else f"{len(files)} differing item(s)"
    )
    return {"ran": True, "exit": proc.returncode, "report": str(text), "json": str(js), "summary": summary, "files": files}


def _relative(name: str, roots: tuple[str, str]) -> str:
    for r in roots:
        if name == r:
            return Path(r).name
        if name.startswith(r.rstrip("/") + "/"):
            return name[len(r.rstrip("/")) + 1:]
    return name


def _leaves(node: Mapping[str, Any], chain: list[str] | None, out: list[dict[str, str]], *roots: str) -> None:
    """Differing leaves of diffoscope's JSON tree as `outer ▸ inner` paths relative to the two outputs."""
    name = _relative(str(node.get("source2") or node.get("source1") or ""), (roots[0], roots[1]))
    if chain is None:
        here: list[str] = []  # the two outputs themselves
    elif chain and name.startswith(chain[-1].rstrip("/") + "/"):
        here = [*chain[:-1], name]  # a path below the previous one: same container
    else:
        here = [*chain, name]
    details = node.get("details") or []
    if node.get("unified_diff") or (not details and node.get("comments")):
        text = node.get("unified_diff") or "\n".join(node.get("comments") or [])
        out.append({"path": " ▸ ".join(p for p in here if p) or name, "diff": str(text)})
    for child in details:
        _leaves(child, here, out, *roots)


