"""A bundle layout split into parts a device call can carry and joined again: whole blobs per part where they fit, a
bigger blob cut and put together, every byte checked; a missing or damaged part is an error that names it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.runner import parts
from devtools.runner.parts import PartsError

ROOT = Path(__file__).resolve().parents[2]
MAX = 4000


def blob(layout: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return digest


def make_layout(tmp_path: Path) -> Path:
    """A layout shaped as a bundle is: a big blob (over two parts), middling ones, small ones, index.json."""
    layout = tmp_path / "bundle"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}\n')
    rnd = __import__("random").Random(7)
    digests = [blob(layout, rnd.randbytes(n)) for n in (9500, 2500, 2100, 1800, 700, 60)]
    (layout / "index.json").write_text(json.dumps({"manifests": digests}) + "\n")
    return layout


def tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
            and p.name != ".joined"}


def test_split_stash_join_gives_the_layout_back(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    made = parts.split(layout, tmp_path / "parts", MAX)
    assert [d.name for d in made] == [parts.part_name(n, len(made)) for n in range(len(made))]
    listing = json.loads((made[0] / parts.LISTING).read_text())
    for d, pieces in zip(made, listing["parts"], strict=True):
        assert sum(p["length"] for p in pieces) <= MAX  # no part over the limit
        assert (d / parts.LISTING).read_bytes() == (made[0] / parts.LISTING).read_bytes()  # each says what the whole is
    cut = [p for part in listing["parts"] for p in part if p["length"] < next(
        f["size"] for f in listing["files"] if f["path"] == p["path"])]
    assert {p["path"] for p in cut} == {f"blobs/sha256/{hashlib.sha256(b).hexdigest()}" for b in
                                        [(layout / f["path"]).read_bytes() for f in listing["files"]] if len(b) > MAX}
    # the smaller files go whole: none of them is cut
    assert all(sum(1 for part in listing["parts"] for p in part if p["path"] == f["path"]) == 1
               for f in listing["files"] if f["size"] <= MAX)
    assert len(made) == 5  # two parts of the big blob alone, its rest and the seven other files packed into three

    # carried one per call, each stashed out of the checkout, in any order
    stashed = tmp_path / "stash"
    for d in reversed(made):
        parts.stash([d], stashed)
    parts.join(stashed, tmp_path / "joined")
    assert tree(tmp_path / "joined") == tree(layout)
    # a second join of the same split is no error; the layout is there
    parts.join(stashed, tmp_path / "joined")


def test_a_missing_part_is_named(tmp_path: Path) -> None:
    made = parts.split(make_layout(tmp_path), tmp_path / "parts", MAX)
    stashed = tmp_path / "stash"
    parts.stash([d for d in made if d is not made[2]], stashed)
    with pytest.raises(PartsError) as exc:
        parts.join(stashed, tmp_path / "joined")
    assert made[2].name in exc.value.what and "1 of 5" in exc.value.what and made[2].name in exc.value.fix
    assert not (tmp_path / "joined").exists()


def test_a_damaged_part_is_refused_when_stashed_and_when_joined(tmp_path: Path) -> None:
    made = parts.split(make_layout(tmp_path), tmp_path / "parts", MAX)
    piece = made[1] / "piece-000"
    data = bytearray(piece.read_bytes())
    data[100] ^= 1
    piece.write_bytes(bytes(data))
    with pytest.raises(PartsError) as exc:
        parts.stash([made[1]], tmp_path / "stash")
    assert exc.value.what == f"{made[1].name} is damaged" and "piece-000" in exc.value.why
    assert f"carry {made[1].name} again" == exc.value.fix

    # damaged after it was stashed: the join checks every piece again
    data[100] ^= 1
    piece.write_bytes(bytes(data))
    got = parts.stash(made, tmp_path / "stash")
    (got[3] / "piece-000").write_bytes(b"short")
    with pytest.raises(PartsError) as exc:
        parts.join(tmp_path / "stash", tmp_path / "joined")
    assert made[3].name in exc.value.what and not (tmp_path / "joined").exists()


def test_a_listing_of_another_split_is_refused(tmp_path: Path) -> None:
    made = parts.split(make_layout(tmp_path), tmp_path / "parts", MAX)
    listing = json.loads((made[0] / parts.LISTING).read_text())
    listing["files"][0]["size"] += 1
    (made[0] / parts.LISTING).write_text(json.dumps(listing))
    with pytest.raises(PartsError) as exc:
        parts.stash([made[0]], tmp_path / "stash")
    assert made[0].name in exc.value.what and parts.LISTING in exc.value.why


def test_a_damaged_layout_is_not_split(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    victim = sorted((layout / "blobs" / "sha256").iterdir())[0]
    victim.write_bytes(victim.read_bytes() + b"x")
    with pytest.raises(PartsError) as exc:
        parts.split(layout, tmp_path / "parts", MAX)
    assert victim.name in exc.value.what and not (tmp_path / "parts").exists()
    with pytest.raises(PartsError):
        parts.split(tmp_path, tmp_path / "parts", MAX)  # not a layout at all


def test_the_command_line_says_what_failed_why_and_what_to_do(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "devtools.runner.parts", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    split = cli("split", str(layout), "--output", str(tmp_path / "parts"), "--max-mib", str(MAX / parts.MIB))
    assert split.returncode == 0, split.stderr
    made = sorted((tmp_path / "parts").iterdir())
    assert cli("stash", *map(str, made[:-1]), "--into", str(tmp_path / "stash")).returncode == 0
    proc = cli("join", "--from", str(tmp_path / "stash"), "--output", str(tmp_path / "joined"))
    assert proc.returncode == 1 and made[-1].name in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert cli("stash", str(made[-1]), "--into", str(tmp_path / "stash")).returncode == 0
    proc = cli("join", "--from", str(tmp_path / "stash"), "--output", str(tmp_path / "joined"))
    assert proc.returncode == 0 and "every blob checked" in proc.stdout
    assert tree(tmp_path / "joined") == tree(layout)
