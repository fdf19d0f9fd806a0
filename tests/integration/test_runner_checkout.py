"""What the GPU runner reads of its checkout through git: the part size that fits one device call beside it, and
the commit its report names."""

from __future__ import annotations

import subprocess
from pathlib import Path

from devtools.runner import main, parts
from devtools.runner.options import resolve


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_default_part_size_leaves_room_for_the_checkout(tmp_path: Path) -> None:
    """A part and the checkout must fit one 64 MiB call together: the default follows the checkout's size, counting
    what git carries (tracked and untracked files, not ignored ones)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("ignored/\n")
    (repo / "big").write_bytes(b"\0" * (10 * parts.MIB))  # untracked, carried
    (repo / "ignored").mkdir()
    (repo / "ignored" / "huge").write_bytes(b"\0" * (30 * parts.MIB))  # not carried
    assert parts.default_max_mib(repo) == parts.CALL_MIB - parts.MARGIN_MIB - 11
    assert parts.default_max_mib(tmp_path / "not-a-checkout") == parts.FALLBACK_MAX_MIB


def test_the_report_names_head_and_says_when_the_tree_is_not_head_s(tmp_path: Path) -> None:
    """A device's copy of the checkout carries the working tree, not always its history: a tree that differs from
    HEAD is named HEAD+changes, never as HEAD."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    opts = resolve(["--out", str(tmp_path / "out")], {}, tmp_path)
    assert main.commit(opts, repo) == head
    (repo / "a.py").write_text("x = 2\n")
    assert main.commit(opts, repo) == f"{head}+changes"
    (repo / "a.py").write_text("x = 1\n")
    (repo / "new.py").write_text("")  # a file the old history does not know
    assert main.commit(opts, repo) == f"{head}+changes"
    assert main.commit(resolve(["--commit", "abc1234"], {}, tmp_path), repo) == "abc1234"
    assert main.commit(opts, tmp_path / "not-a-checkout") == "unknown"
