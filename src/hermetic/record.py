"""Build records: what was built, from what, how, and every file it produced.

A record is plain JSON so that other tools (and later `hermetic verify`) can
read it without hermetic. The install-tree digest covers paths, types, modes,
link targets and contents, not timestamps, so the same build gives the same
digest wherever and whenever it ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .digests import file_sha256
from .errors import VerifyError

RECORD_SCHEMA = "hermetic.build-record/1"


@dataclass(frozen=True)
class TreeEntry:
    path: str  # relative, '/'-separated
    kind: str  # "file" | "dir" | "symlink"
    mode: int  # permission bits only
    size: int = 0
    sha256: str = ""
    target: str = ""  # symlink target

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "type": self.kind, "mode": f"{self.mode:04o}"}
        if self.kind == "file":
            out["size"] = self.size
            out["sha256"] = self.sha256
        if self.kind == "symlink":
            out["target"] = self.target
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TreeEntry:
        return cls(
            path=str(data["path"]),
            kind=str(data["type"]),
            mode=int(str(data["mode"]), 8),
            size=int(data.get("size", 0)),
            sha256=str(data.get("sha256", "")),
            target=str(data.get("target", "")),
        )


def scan_tree(root: Path) -> list[TreeEntry]:
    """Every entry below root, sorted by path; root itself is not listed."""
    entries: list[TreeEntry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            p = base / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                entries.append(TreeEntry(rel, "symlink", 0o777, target=os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(TreeEntry(rel, "dir", mode))
            elif stat.S_ISREG(st.st_mode):
                entries.append(TreeEntry(rel, "file", mode, st.st_size, file_sha256(p)))
            else:
                raise VerifyError(
                    f"unsupported file type in tree: {p}",
                    "install trees hold only files, directories and symlinks",
                    "remove the special file",
                )
    entries.sort(key=lambda e: e.path)
    return entries


def tree_digest(entries: Iterable[TreeEntry]) -> str:
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e.path):
        h.update(json.dumps(e.as_json(), sort_keys=True).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def tree_size(entries: Iterable[TreeEntry]) -> int:
    return sum(e.size for e in entries if e.kind == "file")


def normalize_tree(root: Path, epoch: int) -> None:
    """Clamp mtimes to the epoch and drop group/other write bits (umask 022 semantics)."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o022)
            if st.st_mtime > epoch:
                os.utime(p, (epoch, epoch), follow_symlinks=False)
    st = root.lstat()
    if st.st_mtime > epoch:
        os.utime(root, (epoch, epoch))


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Atomic write: a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_record(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise VerifyError(f"no build record at {path}", "the build has not run", "run `hermetic build llvm`") from exc
    except json.JSONDecodeError as exc:
        raise VerifyError(f"build record {path} is not valid JSON", str(exc), "rebuild to regenerate it") from exc
    if data.get("schema") != RECORD_SCHEMA:
        raise VerifyError(
            f"{path} is not a hermetic build record",
            f"schema is {data.get('schema')!r}, expected {RECORD_SCHEMA!r}",
            "pass the record.json written by `hermetic build`",
        )
    return dict(data)


def compare_trees(expected: list[TreeEntry], actual: list[TreeEntry]) -> list[str]:
    """Human-readable differences, empty when the trees are identical."""
    exp = {e.path: e for e in expected}
    act = {e.path: e for e in actual}
    diffs: list[str] = []
    for path in sorted(exp.keys() | act.keys()):
        a, b = exp.get(path), act.get(path)
        if a is None:
            diffs.append(f"unexpected: {path}")
        elif b is None:
            diffs.append(f"missing: {path}")
        elif a != b:
            what = [f for f in ("kind", "mode", "size", "sha256", "target") if getattr(a, f) != getattr(b, f)]
            diffs.append(f"differs ({', '.join(what)}): {path}")
    return diffs
