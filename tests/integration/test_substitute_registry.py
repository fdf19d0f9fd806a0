"""Substitution through the real docker-registry, with a real build of the tiny recipe.

One machine builds and pushes; "another machine" (a fresh work directory, an empty cache, another
current directory, downloads off) substitutes it. Refusals must not cost a 20-minute build: the
refusing machine has an empty source cache, no mirror and `--no-urls --no-apt`, so the build it falls back
to fails at once fetching its source (exit 4), which shows that it was attempted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import TINY, hermetic
from hermetic.attest import attach as attest
from hermetic.attest import provenance
from hermetic.oci import referrers
from hermetic.oci.layout import Layout, pick_root
from hermetic.plan import substitute

Registry = Any  # the fixture class in conftest.py


@pytest.fixture(scope="module")
def image(tiny_install: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("subst") / "tiny-support"
    hermetic("image", "llvm", "--record", str(tiny_install), "--output", str(out), "--quiet")
    return out


def _push(layout: Path, ref: str) -> list[str]:
    return hermetic("push", str(layout), ref, "--insecure", "--quiet").stdout.splitlines()


def _elsewhere(tmp_path: Path, registry_host: str, repo: str, *extra: str) -> Any:
    """`hermetic build llvm --substitute` as a second machine would run it: nothing cached, nothing downloadable."""
    cwd = tmp_path / "m2" / "cwd"
    cwd.mkdir(parents=True)
    return hermetic(
        "build", "llvm", "--llvm-recipe", str(TINY), "--variant", "support", "--toolchain", "host",
        "--work-dir", str(tmp_path / "m2" / "work"),
        "--cache", str(tmp_path / "m2" / "cache"), "--no-urls", "--no-apt", "--jobs", "2",
        "--substitute", f"http://{registry_host}/{repo}", *extra, cwd=cwd, check=False,
        env={"HOME": str(tmp_path / "m2")},
    )


def _plan_line(stderr: str, name: str) -> str:
    return next(line for line in stderr.splitlines() if f"] {name}" in line)


def test_a_pushed_build_is_substituted_on_another_machine(
    image: Path, tiny_install: Path, registry: Registry, tmp_path: Path
) -> None:
    built = json.loads(tiny_install.read_text())
    digest = pick_root(Layout(image)).digest
    repo = "subst/tiny-support"
    lines = _push(image, f"{registry.host}/{repo}:1.0.0")
    tag = substitute.inputs_tag(built["inputs_digest"])
    assert f"{registry.host}/{repo}:{tag} {digest} (inputs tag, for --substitute)" in lines
    assert len([x for x in lines if x.endswith(f"-> {digest} (tag-schema)")]) == 3, lines
    assert tag in registry.tags(repo)

    proc = _elsewhere(tmp_path, registry.host, repo)
    assert proc.returncode == 0, proc.stderr
    assert "[pull] build tiny-support" in _plan_line(proc.stderr, "build tiny-support")
    assert f"{registry.host}/{repo}@{digest}" in _plan_line(proc.stderr, "build tiny-support")
    for step in ("fetch source", "prune source", "fetch wheelhouse"):
        assert "[skip]" in _plan_line(proc.stderr, step) and "is pulled" in _plan_line(proc.stderr, step)
    shown = json.loads(proc.stdout)
    work = tmp_path / "m2" / "work"
    rec = json.loads((work / "tiny" / "support" / "record.json").read_text())
    assert shown["tree_digest"] == rec["tree"]["digest"] == built["tree"]["digest"]
    assert rec["substituted"] == shown["substituted"] == f"{registry.host}/{repo}@{digest}"
    assert rec["inputs_digest"] == built["inputs_digest"] and "substitute_refused" not in rec
    assert rec["install_root"] == str(work / "tiny" / "support" / "install")
    hermetic("verify-tree", str(work / "tiny" / "support" / "install"), "--record", str(tiny_install))
    assert not (tmp_path / "m2" / "cache" / "sources").exists(), "a substituted build fetched its source"

    # the image: the pulled layout is kept and reused, with the digest the first machine published ...
    out = hermetic("image", "llvm", "--llvm-recipe", str(TINY), "--variant", "support", "--work-dir", str(work)).stdout.split()
    assert out[:2] == ["tiny-support-1.0.0-linux-amd64", digest]
    kept = Layout(work / "images" / "tiny-support-1.0.0-linux-amd64")
    assert sorted(r.kind for r in referrers.referrers(kept)) == ["build-record", "provenance", "sbom"]
    # ... which is also what writing it from the substituted tree gives
    fresh = hermetic("image", "llvm", "--llvm-recipe", str(TINY), "--variant", "support", "--work-dir", str(work), "--output",
                     str(tmp_path / "rewritten"), "--no-attest").stdout.split()
    assert fresh[1] == digest

    # a second run is done, and asks nobody
    again = _elsewhere(tmp_path / "again", registry.host, repo, "--work-dir", str(work))
    assert again.returncode == 0 and "[done] build tiny-support" in again.stderr, again.stderr


def test_a_tampered_provenance_is_refused_and_the_build_attempted(
    image: Path, registry: Registry, tmp_path: Path
) -> None:
    tampered = tmp_path / "tampered"
    shutil.copytree(image, tampered)
    layout = Layout(tampered)
    st = json.loads(referrers.referrers(layout, artifact_type=provenance.MEDIA_TYPE)[0].read())
    st["predicate"]["buildDefinition"]["internalParameters"]["inputsDigest"] = "0" * 64
    referrers.attach(layout, pick_root(layout), provenance.MEDIA_TYPE, provenance.dumps(st), "provenance.intoto.json",
                     {referrers.ANN_KIND: attest.KIND_PROVENANCE})
    repo = "subst/tampered"
    _push(tampered, f"{registry.host}/{repo}:1.0.0")

    proc = _elsewhere(tmp_path, registry.host, repo)
    assert "[pull] build tiny-support" in _plan_line(proc.stderr, "build tiny-support")
    refused = [line for line in proc.stderr.splitlines() if line.startswith("warning: substitute")]
    assert len(refused) == 1 and "refused: the provenance names inputs digest 0000000000000000…" in refused[0], proc.stderr
    assert refused[0].endswith("; building instead")
    # the build ran as if there were no substitute: its source fetch comes first, and fails (no cache, no origin)
    assert proc.stderr.index(refused[0]) < proc.stderr.index("==> fetch source")
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr
    work = tmp_path / "m2" / "work"
    assert not (work / "tiny" / "support" / "record.json").exists() and not (work / "images").exists()


def test_a_layer_that_fails_its_digest_is_refused(image: Path, fresh_registry: Registry, tmp_path: Path) -> None:
    repo = "subst/damaged"
    _push(image, f"{fresh_registry.host}/{repo}:1.0.0")
    manifest = Layout(image).read_json(pick_root(Layout(image)))
    layer = manifest["layers"][0]["digest"].removeprefix("sha256:")
    data = fresh_registry.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / layer[:2] / layer / "data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))

    proc = _elsewhere(tmp_path, fresh_registry.host, repo)
    refused = [line for line in proc.stderr.splitlines() if line.startswith("warning: substitute")]
    assert len(refused) == 1 and f"refused: blob sha256:{layer} from" in refused[0], proc.stderr
    assert "does not match its digest" in refused[0]
    assert proc.returncode == 4 and "==> fetch source" in proc.stderr


def test_an_unreachable_substitute_is_warned_about_and_the_build_runs(registry: Registry, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _elsewhere(tmp_path, f"127.0.0.1:{port}", "nobody/home")
    assert f"warning: substitute http://127.0.0.1:{port}/nobody/home not asked:" in proc.stderr
    assert "[run ] build tiny-support" in _plan_line(proc.stderr, "build tiny-support")
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
