"""`hermetic verify` on a real LLVM build: the committed record of a host `support` build made on a Debian 12 dev
machine, rebuilt here by conftest.py's `host_verify` in another directory, cwd and umask, later, from the whole
release archive, with foreign tools first on PATH: pruned source and install tree must match. Verify from a
pulled image's provenance, and what it reports when a rebuild differs, are shown on the tiny recipe
(tests/integration/test_verify_tiny.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

DEBIAN_12_GCC = "cc (Debian 12.2.0-14+deb12u1) 12.2.0"


@pytest.fixture(scope="module")
def report(host_verify: dict[str, Any]) -> dict[str, Any]:
    rebuilt = json.loads(host_verify["record"].read_text())
    if rebuilt["toolchain"]["cc"] != DEBIAN_12_GCC:
        pytest.skip(f"rebuilt with {rebuilt['toolchain']['cc']!r}: the committed record is of Debian 12's gcc")
    assert host_verify["rc"] == 0, host_verify["stderr"][-3000:]
    data: dict[str, Any] = host_verify["report"]
    return data


def test_the_rebuild_matches_the_committed_build(report: dict[str, Any], golden: dict[str, Any]) -> None:
    assert report["match"] is True and report["kind"] == "llvm"
    got = {c["what"]: c for c in report["comparisons"]}
    assert set(got) == {"pruned source", "install tree"}
    want = golden["llvm-support-host-debian12"]
    assert got["pruned source"]["recorded"] == got["pruned source"]["rebuilt"] == "sha256:" + want["pruned"]
    assert got["pruned source"]["note"].startswith("pruned again from")
    assert got["install tree"]["recorded"] == got["install tree"]["rebuilt"] == want["tree"]
    # pruning drops only what the build never reads: this one read the whole release archive
    assert got["install tree"]["note"].startswith("built from the whole ")


def test_the_conditions_differ_as_verify_says(report: dict[str, Any], host_verify: dict[str, Any]) -> None:
    cond = report["conditions"]
    assert cond["umask"] != cond["original_umask"]
    assert cond["source"].endswith("(--from-release)")
    assert cond["rebuild_started"] > cond["original_finished"]
    rebuilt = json.loads(host_verify["record"].read_text())
    assert rebuilt["offline"]["enforced"] is True and rebuilt["offline"]["method"] in ("netns", "userns+netns")
    assert rebuilt["install_root"].startswith(str(host_verify["base"] / "elsewhere"))


def test_the_pinned_tools_ran_and_a_foreign_python_changed_nothing(host_verify: dict[str, Any]) -> None:
    rebuilt = json.loads(host_verify["record"].read_text())
    # the pinned tools ran, not the ones first on the user's PATH
    assert rebuilt["toolchain"]["cmake"] == "cmake version 4.4.4"
    # LLVM's configure ran the foreign python3 (which finds yaml and pygments): only the recipe's answer to the
    # module probe keeps LLVM_HAVE_OPT_VIEWER_MODULES, and so the tree, the same
    log = (host_verify["record"].parent / "build.log").read_text()
    assert f"Found Python3: {host_verify['base'] / 'foreign' / 'bin' / 'python3'} " in log, "configure saw another Python"
