"""A rebuild from a bundle alone gives the digests of the normal build: the zig `support` tree and its image.

It costs one more zig `support` build (about 5 minutes on the 2-core dev machine) beside the shared
`zig_support_install`, whose tree and image it must give.
The rebuild runs in a network namespace of its own where the machine allows one (root: `unshare --net`), with
an empty cache and every origin but the bundle turned off."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import ROOT, hermetic


def _no_network(argv: list[str]) -> list[str]:
    """argv in a fresh network namespace (no route anywhere), where this machine lets us make one."""
    unshare = shutil.which("unshare")
    if unshare and os.geteuid() == 0 and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net", *argv]
    return argv


def test_rebuild_from_the_bundle_alone_gives_the_same_digests(
    zig_support_install: Path, source_cache: Path, tmp_path: Path
) -> None:
    bundle_dir = tmp_path / "bundle"
    made = hermetic("bundle", "--variant", "support", "--toolchain", "zig", "--cache", str(source_cache),
                    "--work-dir", str(tmp_path / "w0"), "--output", str(bundle_dir))
    assert "bundle-llvm-support-19.1.7-linux-amd64" in made.stdout
    work = tmp_path / "w1"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    # an empty --cache: the bundle's inputs go to a cache of their own; this one must stay empty
    empty = tmp_path / "empty-cache"
    argv = [sys.executable, "-m", "hermetic", "all", "--variant", "support", "--toolchain", "zig",
            "--bundle", str(bundle_dir), "--work-dir", str(work), "--cache", str(empty),
            "--jobs", str(os.cpu_count() or 2), "--offline", "auto"]
    proc = subprocess.run(_no_network(argv), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "[skip] fetch source" in proc.stdout and "[done] prune source" in proc.stdout, proc.stdout
    assert not empty.exists() or not any(empty.rglob("*")), "the rebuild used a cache other than the bundle's"
    want = json.loads(zig_support_install.read_text())
    got = json.loads((work / "llvm" / "support" / "record.json").read_text())
    assert got["tree"]["digest"] == want["tree"]["digest"]
    assert got["pruned"]["sha256"] == want["pruned"]["sha256"] and got["sources"][0]["sha256"] == want["sources"][0]["sha256"]
    # the image: written from each record by the same code; the digest depends only on the tree and the labels
    ours = hermetic("image", "llvm", "--record", str(zig_support_install), "--output", str(tmp_path / "img"),
                    "--no-attest", "--work-dir", str(tmp_path / "w2")).stdout.split()[1]
    theirs = json.loads((work / "images" / "llvm-support-19.1.7-linux-amd64" / "index.json").read_text())
    assert theirs["manifests"][0]["digest"] == ours
