"""The CLI at its edges, run as a user runs it: closed pipes, where a pull writes, and messages for careless input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_oci import make_record
from test_oci_layers_benign import DIR, DOT_ROOT, REG, layout_of, tar_of

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, stdout: int | None = subprocess.PIPE, stderr: int | None = subprocess.PIPE
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "hermetic", "--root", str(ROOT), *args], cwd=cwd, env=env,
                          stdout=stdout, stderr=stderr, text=True, timeout=120)


@pytest.fixture
def closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose reader is already gone: every write to it fails with EPIPE."""
    r, w = os.pipe()
    os.close(r)
    yield w
    os.close(w)


# a plain layer (no ./ root, no absolute link), which the unpacker has always accepted
PLAIN = tar_of(("usr/", DIR, "", b"", 0o755), ("usr/a", REG, "", b"plain", 0o644))


@pytest.fixture
def img(tmp_path: Path) -> Path:
    layout_of(tmp_path / "img", PLAIN)
    return tmp_path / "img"


# -- EPIPE: a listing may be cut short; a job is never cut short, and never reads as done when it is not ---------


def test_listing_to_a_closed_pipe_is_a_quiet_success(tmp_path: Path, closed_pipe: int) -> None:
    for args in (("variants",), ("--help",), ("inspect", str(tmp_path))):
        if args[0] == "inspect":
            layout_of(tmp_path / "l", DOT_ROOT)
            args = ("inspect", str(tmp_path / "l"))
        proc = run(*args, cwd=tmp_path, stdout=closed_pipe)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""


def test_a_closed_stderr_does_not_stop_a_pull(img: Path, tmp_path: Path, closed_pipe: int) -> None:
    proc = run("pull", f"oci:{img}", "--unpack", "out", cwd=tmp_path, stderr=closed_pipe)
    assert proc.returncode == 0
    assert proc.stdout.split()[2] == str(tmp_path / "out")
    assert (tmp_path / "out/usr/a").read_bytes() == b"plain"


def test_a_pull_whose_output_is_gone_finishes_and_says_it_was_not_heard(img: Path, tmp_path: Path, closed_pipe: int) -> None:
    """`hermetic pull … 2>&1 | head -0`: the progress line no longer stops the pull half way with exit 0."""
    proc = run("pull", f"oci:{img}", "--unpack", "out", cwd=tmp_path, stdout=closed_pipe, stderr=closed_pipe)
    assert proc.returncode == 141
    assert (tmp_path / "out/usr/a").read_bytes() == b"plain"


def test_a_failing_pull_keeps_its_exit_code_when_nobody_listens(img: Path, tmp_path: Path, closed_pipe: int) -> None:
    proc = run("pull", f"oci:{img}", "--unpack", "out", "--arch", "arm64", cwd=tmp_path, stdout=closed_pipe,
               stderr=closed_pipe)
    assert proc.returncode == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img"]


# -- where a pull writes ----------------------------------------------------------------------------------


def test_pull_never_touches_what_it_did_not_write(img: Path, tmp_path: Path) -> None:
    """The issue's data loss: `pull --unpack DIR` staged at DIR/../.DIR.layout and removed it afterwards."""
    mine = tmp_path / ".out.layout"
    mine.mkdir()
    (mine / "keep").write_text("the user's own")
    proc = run("pull", f"oci:{img}", "--unpack", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (mine / "keep").read_text() == "the user's own"
    refused = run("pull", f"oci:{img}", "--unpack", "out", cwd=tmp_path)  # out is not empty now
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert (mine / "keep").read_text() == "the user's own"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.layout", "img", "out"]


def test_pull_from_a_layout_named_like_the_old_staging_path(img: Path, tmp_path: Path) -> None:
    shutil.copytree(img, tmp_path / ".root.layout")
    proc = run("pull", "oci:.root.layout", "--unpack", "root", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ".root.layout/index.json").read_bytes() == (img / "index.json").read_bytes()
    assert (tmp_path / "root/usr/a").is_file()
    same = run("pull", "oci:.root.layout", "--layout", ".root.layout", cwd=tmp_path)
    assert same.returncode == 2 and "being pulled from" in same.stderr


def test_a_refused_pull_leaves_no_parents(img: Path, tmp_path: Path) -> None:
    proc = run("pull", f"oci:{img}", "--unpack", "a/b/c/root", "--arch", "arm64", cwd=tmp_path)
    assert proc.returncode == 8 and "fix:" in proc.stderr
    assert not (tmp_path / "a").exists()
    (tmp_path / "a").mkdir()
    proc = run("pull", f"oci:{img}", "--unpack", "a/b/c/root", "--arch", "arm64", cwd=tmp_path)
    assert proc.returncode == 8 and (tmp_path / "a").is_dir() and not (tmp_path / "a/b").exists()


@pytest.mark.parametrize(("where", "words"), [
    (["--unpack", "/"], "cannot write into /"),
    (["--layout", "notalayout"], "choose an empty or new --layout directory"),
])
def test_impossible_targets_are_refused_before_anything_is_read(img: Path, tmp_path: Path, where: list[str], words: str) -> None:
    (tmp_path / "notalayout").mkdir()
    (tmp_path / "notalayout/file").write_text("x")
    proc = run("pull", f"oci:{img}", *where, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and words in proc.stderr
    assert "--output" not in proc.stderr
    assert (tmp_path / "notalayout/file").read_text() == "x"


# -- messages for careless input ------------------------------------------------------------------------------


def test_inspect_says_what_a_file_is(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "image.tar", "w") as tar:
        tar.add(__file__, arcname="x")
    (tmp_path / "garbage").write_bytes(os.urandom(300))
    (tmp_path / "other.json").write_text(json.dumps({"name": "not a record"}))
    for name, words in (("image.tar", "tar archive"), ("garbage", "not JSON"), ("other.json", "not an LLVM build record")):
        proc = run("inspect", name, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and "run `hermetic build llvm`" not in proc.stderr


def test_a_tag_too_long_is_named_as_such(tmp_path: Path) -> None:
    proc = run("pull", "127.0.0.1:5000/x:" + "a" * 5000, "--unpack", "z", cwd=tmp_path)
    assert proc.returncode == 2 and "at most 128" in proc.stderr and "File name too long" not in proc.stderr


def test_root_that_does_not_exist(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.run([sys.executable, "-m", "hermetic", "--root", "/nonexistent", "variants"], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "--root /nonexistent: no such directory" in proc.stderr


def test_inspect_checks_a_record_against_its_files_and_its_tree(tmp_path: Path) -> None:
    record = make_record(tmp_path / "b")
    ok = run("inspect", str(record), cwd=tmp_path)
    assert ok.returncode == 0 and "on disk   matches the record" in ok.stdout
    shutil.rmtree(tmp_path / "b/install")
    absent = run("inspect", str(record), cwd=tmp_path)
    assert absent.returncode == 0 and "not checked: no tree at" in absent.stdout
    data = json.loads(record.read_text())
    data["tree"]["digest"] = "sha256:" + "0" * 64
    record.write_text(json.dumps(data))
    zeroed = run("inspect", str(record), cwd=tmp_path)
    assert zeroed.returncode == 8 and "is not that of the files it lists" in zeroed.stderr


def test_a_listing_keeps_its_verdict_when_nobody_reads_it(tmp_path: Path, closed_pipe: int) -> None:
    """`hermetic inspect X | head -1`: the report is cut short, the verdict (exit 8) is not."""
    record = make_record(tmp_path / "b")
    data = json.loads(record.read_text())
    data["tree"]["digest"] = "sha256:" + "0" * 64
    record.write_text(json.dumps(data))
    proc = run("inspect", str(record), cwd=tmp_path, stdout=closed_pipe)
    assert proc.returncode == 8 and "is not that of the files it lists" in proc.stderr
