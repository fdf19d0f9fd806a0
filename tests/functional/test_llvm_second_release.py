"""A second LLVM release from the same recipe, rebuilt from a bundle alone: `support` of 22.1.8.

Debian's orig tarball is fetched through apt into the session's cache, `hermetic bundle` writes every input of
the build (the pruned source, the pinned toolchain, the wheelhouse, the recipe, the plan) as one OCI layout, and
the build then runs from that bundle alone, in a network namespace of its own where the machine allows one, with
an empty cache and every other origin off, beside the default release's build in one work dir. One cold build
shows both: a second release is data, and an air-gapped rebuild from a bundle gives the committed digest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, hermetic

VERSION = "22.1.8"
PREFIX = f"usr/lib64/llvm-support-{VERSION}"


def _no_network(argv: list[str]) -> list[str]:
    """argv in a fresh network namespace (no route anywhere), where this machine lets us make one."""
    unshare = shutil.which("unshare")
    if unshare and os.geteuid() == 0 and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net", *argv]
    return argv


@pytest.fixture(scope="module")
def built(support_install: Path, source_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """About 5 minutes on 2 cores: the bundle (a minute) and one cold build whose zig runtimes start from nothing.
    The default release beside it is the session's host build (`support_install`), so that this file runs in
    the host build's process (conftest.BUILD_GROUPS) and the two long groups stay about even."""
    base = tmp_path_factory.mktemp("release-bundle")
    bundle = base / "bundle"
    made = hermetic("bundle", "--llvm-version", VERSION, "--variant", "support", "--toolchain", "zig",
                    "--cache", str(source_cache), "--work-dir", str(base / "w0"), "--output", str(bundle))
    work = support_install.parents[2]  # <work>/llvm/support/record.json: the same work dir
    before = support_install.read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    empty = base / "empty-cache"  # the bundle's inputs go to a cache of their own; this one must stay empty
    argv = [sys.executable, "-m", "hermetic", "build", "llvm", "--llvm-version", VERSION, "--variant", "support",
            "--toolchain", "zig", "--bundle", str(bundle), "--work-dir", str(work), "--cache", str(empty),
            "--jobs", str(os.cpu_count() or 2), "--offline", "auto"]
    proc = subprocess.run(_no_network(argv), cwd=base, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rec = json.loads((work / "llvm" / f"support-{VERSION}" / "record.json").read_text())
    return {"record": rec, "default_untouched": support_install.read_bytes() == before, "made": made.stdout,
            "plan": proc.stderr, "empty": empty}


def test_the_release_is_recorded_and_installed_under_its_own_prefix(built: dict[str, Any]) -> None:
    rec = built["record"]
    assert rec["recipe"]["version"] == VERSION
    assert rec["prefix"] == f"/{PREFIX}"
    assert rec["source_date_epoch"] == 1781740800
    assert rec["sources"][0]["sha256"] == "b49b9277aef97616320b2da259e1f8174c65b0ce2fbe2e8629644a97693402fe"
    assert rec["test_package"]["output"] == f"LLVM {VERSION}"
    paths = [f["path"] for f in rec["tree"]["files"]]
    assert sorted(p.rsplit("/", 1)[1] for p in paths if p.startswith(f"{PREFIX}/lib/lib")) == [
        "libLLVMDemangle.a", "libLLVMSupport.a"]
    config = Path(rec["install_root"], PREFIX, "lib/cmake/llvm/LLVMConfigVersion.cmake").read_text()
    assert f'"{VERSION}"' in config


def test_the_default_release_builds_beside_it(built: dict[str, Any]) -> None:
    assert built["default_untouched"], "the 19.1.7 build's record changed"


def test_same_tree_as_the_committed_build(built: dict[str, Any], golden: dict[str, Any]) -> None:
    """The pinned toolchain makes the tree a function of the inputs: this machine's build gives the digest
    tests/golden/digests.json names (a Debian 12 dev machine's build)."""
    committed = golden["llvm-support-22.1.8-zig-amd64"]
    assert committed["toolchain_id"] == built["record"]["toolchain_id"]
    assert built["record"]["tree"]["digest"] == committed["tree"]


def test_the_bundle_alone_fed_the_build(built: dict[str, Any]) -> None:
    assert f"bundle-llvm-support-{VERSION}-linux-amd64" in built["made"]
    assert "[skip] fetch source" in built["plan"] and "[done] prune source" in built["plan"], built["plan"]
    empty = built["empty"]
    assert not empty.exists() or not any(empty.rglob("*")), "the rebuild used a cache other than the bundle's"
