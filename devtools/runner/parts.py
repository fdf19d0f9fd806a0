"""A bundle layout in parts that time-limited device calls can carry, and the layout joined again, every byte checked.

`split` packs the layout's files whole into parts of at most --max-mib each (a file bigger than a part is cut into
pieces); every part holds the same listing (parts.json: each file's sha256, each piece's place and sha256), so any
part says what the whole is. On the device `stash` checks a carried part and copies it out of the checkout (an ignored
path is gone in the next call), and `join` puts the layout together once every part is there, checking each piece,
each file and each blob against its digest. Standard library only: it runs on the device before anything else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "hermetic.bundle-parts/1"
LISTING, MARK = "parts.json", "part.json"
MIB = 1024 * 1024
# A device call carries 64 MiB of working tree, the checkout itself included (about 16 MiB on 2026-11-28, and
# growing with reports/): a part gets what the checkout leaves, less a margin for what changes before the calls.
CALL_MIB = 64
MARGIN_MIB = 2
FALLBACK_MAX_MIB = 44  # where git cannot say how big the checkout is


class PartsError(Exception):
    """What failed, why, and what to do (exit 1)."""

    def __init__(self, what: str, why: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.why, self.fix = what, why, fix


@dataclass(frozen=True)
class Piece:
    path: str  # the file's path in the layout
    offset: int
    length: int


def checkout_mib(root: Path) -> float | None:
    """What a device call carries of the checkout at `root`: its tracked files and the untracked ones git does not
    ignore, in MiB; None where git cannot tell."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    total = 0
    for name in out.split(b"\0"):
        path = root / os.fsdecode(name)
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total / MIB


def default_max_mib(root: Path) -> float:
    """The biggest part that fits one call beside the checkout at `root`."""
    size = checkout_mib(root)
    if size is None:
        return FALLBACK_MAX_MIB
    return max(1.0, CALL_MIB - MARGIN_MIB - float(int(size) + 1))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(MIB):
            h.update(block)
    return h.hexdigest()


def read_range(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def layout_files(layout: Path) -> list[tuple[str, int]]:
    """Every file of the layout (path, size), sorted; a link or odd entry is refused, not followed."""
    if not (layout / "oci-layout").is_file() or not (layout / "index.json").is_file():
        raise PartsError(f"{layout} is not an OCI image layout", "it has no oci-layout or index.json",
                         "pass the directory `hermetic bundle --output` wrote")
    out = []
    for path in sorted(layout.rglob("*")):
        rel = path.relative_to(layout).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise PartsError(f"{layout} holds {rel}, neither a file nor a directory", "a layout holds only files",
                             "write the bundle again")
        if path.is_file():
            out.append((rel, path.stat().st_size))
    return out


def pack(files: Sequence[tuple[str, int]], max_bytes: int) -> list[list[Piece]]:
    """Parts of at most max_bytes: a file bigger than a part first gives whole parts of its own, then the files (and
    those files' rests) go whole into the first part with room, biggest first."""
    parts: list[list[Piece]] = []
    items: list[Piece] = []
    for path, size in files:
        offset = 0
        while size - offset > max_bytes:
            parts.append([Piece(path, offset, max_bytes)])
            offset += max_bytes
        items.append(Piece(path, offset, size - offset))
    bins: list[list[Piece]] = []
    room: list[int] = []
    for item in sorted(items, key=lambda p: (-p.length, p.path)):
        at = next((i for i, r in enumerate(room) if r >= item.length), None)
        if at is None:
            bins.append([])
            room.append(max_bytes)
            at = len(bins) - 1
        bins[at].append(item)
        room[at] -= item.length
    return parts + bins


def _check_blobs(layout: Path, files: Sequence[tuple[str, int]]) -> dict[str, str]:
    """Each file's sha256; a blob whose bytes are not its name is refused before anything is written."""
    sums = {}
    for rel, _ in files:
        got = sha256_file(layout / rel)
        if rel.startswith("blobs/sha256/") and got != rel.rsplit("/", 1)[1]:
            raise PartsError(f"{layout / rel} is damaged", f"its sha256 is {got}",
                             "write the bundle again (`hermetic bundle`)")
        sums[rel] = got
    return sums


def split(layout: Path, out: Path, max_bytes: int) -> list[Path]:
    """The layout into out/part-NN directories (out new or empty); their paths."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PartsError(f"{out} exists and is not empty", "parts are written into a new directory",
                         f"pass another --output, or remove {out} yourself")
    files = layout_files(layout)
    sums = _check_blobs(layout, files)
    plan = pack(files, max_bytes)
    pieces: list[list[dict[str, Any]]] = [
        [{"path": p.path, "offset": p.offset, "length": p.length,
          "sha256": hashlib.sha256(read_range(layout / p.path, p.offset, p.length)).hexdigest()} for p in part]
        for part in plan]
    listing = {"schema": SCHEMA, "max_bytes": max_bytes,
               "files": [{"path": rel, "size": size, "sha256": sums[rel]} for rel, size in files], "parts": pieces}
    body = (json.dumps(listing, indent=1, sort_keys=True) + "\n").encode()
    set_id = hashlib.sha256(body).hexdigest()
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for n, part in enumerate(pieces):
        d = out / part_name(n, len(pieces))
        d.mkdir()
        (d / LISTING).write_bytes(body)
        (d / MARK).write_text(json.dumps({"set": set_id, "part": n, "count": len(pieces)}) + "\n")
        for i, p in enumerate(part):
            (d / f"piece-{i:03d}").write_bytes(read_range(layout / p["path"], p["offset"], p["length"]))
        made.append(d)
    return made


def part_name(n: int, count: int) -> str:
    return f"part-{n:02d}-of-{count:02d}"


def _read_part(part: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A part's mark and listing, the listing being the one the mark names."""
    try:
        mark = json.loads((part / MARK).read_text())
        body = (part / LISTING).read_bytes()
        listing = json.loads(body)
    except (OSError, ValueError) as exc:
        raise PartsError(f"{part} is not a bundle part", f"{type(exc).__name__}: {exc}",
                         "carry the part directory `parts.py split` wrote") from None
    if hashlib.sha256(body).hexdigest() != mark.get("set") or listing.get("schema") != SCHEMA:
        raise PartsError(f"{part.name} is damaged", f"its {LISTING} is not the listing of the split its {MARK} names",
                         f"carry {part.name} again")
    return mark, listing


def check_part(part: Path) -> dict[str, Any]:
    """Every piece of a part against the listing; its mark."""
    mark, listing = _read_part(part)
    for i, p in enumerate(listing["parts"][mark["part"]]):
        piece = part / f"piece-{i:03d}"
        if not piece.is_file():
            raise PartsError(f"{part.name} is damaged", f"{piece.name} (of {p['path']}) is missing", f"carry {part.name} again")
        got = sha256_file(piece)
        if got != p["sha256"] or piece.stat().st_size != p["length"]:
            raise PartsError(f"{part.name} is damaged",
                             f"{piece.name} (bytes {p['offset']}..{p['offset'] + p['length']} of {p['path']}) has "
                             f"sha256 {got}, the listing says {p['sha256']}", f"carry {part.name} again")
    return mark


def stash(parts: Sequence[Path], into: Path) -> list[Path]:
    """Each carried part, checked, copied to into/<set>/<part> (replacing an earlier copy of that part)."""
    got = []
    for part in parts:
        mark = check_part(part)
        dest = into / mark["set"][:16] / part_name(mark["part"], mark["count"])
        tmp = dest.with_name(dest.name + ".partial")
        for old in (tmp, dest):
            if old.exists():
                shutil.rmtree(old)  # ours: written by an earlier stash
        shutil.copytree(part, tmp)
        os.replace(tmp, dest)
        got.append(dest)
    return got


def _one_set(stashed: Path) -> Path:
    sets = sorted(d for d in stashed.iterdir() if d.is_dir()) if stashed.is_dir() else []
    if len(sets) != 1:
        why = f"{stashed} holds {len(sets)} splits" + (f": {', '.join(d.name for d in sets)}" if sets else "")
        raise PartsError("no single set of bundle parts to join", why,
                         "stash the parts of one split (`device.sh stash` in each call that carries one)")
    return sets[0]


def join(stashed: Path, dest: Path) -> dict[str, Any]:
    """The layout put together at dest from the stashed parts, every piece, file and blob checked."""
    where = _one_set(stashed)
    parts = sorted(p for p in where.iterdir() if p.is_dir() and not p.name.endswith(".partial"))
    if not parts:
        raise PartsError("no bundle part is stashed", f"{where} is empty", "stash the parts first")
    mark, listing = _read_part(parts[0])
    count = len(listing["parts"])
    missing = [part_name(n, count) for n in range(count) if not (where / part_name(n, count)).is_dir()]
    if missing:
        raise PartsError(f"{len(missing)} of {count} bundle parts are missing: {', '.join(missing)}",
                         f"{where} holds {', '.join(p.name for p in parts)}",
                         f"carry {', '.join(missing)} (each in a call of its own) and `device.sh stash` them")
    for n in range(count):
        check_part(where / part_name(n, count))
    if dest.exists():
        if (dest / ".joined").is_file() and (dest / ".joined").read_text().strip() == mark["set"]:
            return listing  # joined from this very split before
        raise PartsError(f"{dest} exists", "the bundle is joined into a new directory", f"remove {dest} or pass another")
    tmp = dest.with_name(f".{dest.name}.partial{os.getpid()}")
    _assemble(where, listing, tmp)
    (tmp / ".joined").write_text(mark["set"] + "\n")
    os.replace(tmp, dest)
    return listing


def _assemble(where: Path, listing: dict[str, Any], tmp: Path) -> None:
    count = len(listing["parts"])
    sources: dict[str, list[tuple[int, Path]]] = {}
    for n, part in enumerate(listing["parts"]):
        for i, p in enumerate(part):
            sources.setdefault(p["path"], []).append((p["offset"], where / part_name(n, count) / f"piece-{i:03d}"))
    for f in listing["files"]:
        target = tmp / f["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as sink:
            for offset, piece in sorted(sources.get(f["path"], [])):
                if sink.tell() != offset:
                    raise PartsError(f"the listing of the parts leaves a gap in {f['path']}", f"at byte {sink.tell()}",
                                     "split the bundle again")
                with open(piece, "rb") as src:
                    shutil.copyfileobj(src, sink, MIB)
        got = sha256_file(target)
        blob = f["path"].rsplit("/", 1)[1] if f["path"].startswith("blobs/sha256/") else f["sha256"]
        if got != f["sha256"] or got != blob:
            raise PartsError(f"{f['path']} joined from the parts is not the bundle's",
                             f"sha256 {got}, expected {f['sha256']}", "split the bundle again")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m devtools.runner.parts", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split", help="a bundle layout into part directories")
    s.add_argument("layout", type=Path)
    s.add_argument("--output", type=Path, required=True, help="a new directory for part-NN-of-MM/")
    s.add_argument("--max-mib", type=float, help=f"the most one part holds (default: what a {CALL_MIB} MiB device call "
                   f"leaves beside this checkout, less {MARGIN_MIB} MiB)")
    t = sub.add_parser("stash", help="carried parts, each checked, copied into DIR/<split>/")
    t.add_argument("parts", type=Path, nargs="+")
    t.add_argument("--into", type=Path, required=True)
    j = sub.add_parser("join", help="the stashed parts put together into a layout, every blob checked")
    j.add_argument("--from", dest="stashed", type=Path, required=True)
    j.add_argument("--output", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        if args.cmd == "split":
            max_mib = args.max_mib if args.max_mib is not None else default_max_mib(Path(__file__).resolve().parents[2])
            print(f"parts of at most {max_mib:g} MiB")
            for d in split(args.layout, args.output, int(max_mib * MIB)):
                size = sum(f.stat().st_size for f in d.iterdir())
                print(f"{d} {size / MIB:.1f} MiB")
        elif args.cmd == "stash":
            for d in stash(args.parts, args.into):
                print(f"stashed {d}")
        else:
            listing = join(args.stashed, args.output)
            total = sum(f["size"] for f in listing["files"])
            print(f"joined {args.output}: {len(listing['files'])} files, {total / MIB:.1f} MiB, every blob checked")
    except PartsError as exc:
        print(f"parts: {exc.what}\n  why: {exc.why}\n  fix: {exc.fix}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
