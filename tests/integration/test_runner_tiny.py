"""The GPU runner end to end on the tiny recipe, here without a GPU: its builds through the real hermetic, offline
from a carried pruned archive, its records copied and summarized, the golden comparison, the packed tree, the gpu
tier skipped and said so; run again, hermetic keeps both builds and their steps say `done`. From a bundle carried
in parts and joined again: the same trees, the build of the bundle's variant with its plan's inputs digest."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.runner import parts
from helpers import ROOT, TINY, hermetic


@pytest.fixture(scope="module")
def carried(tmp_path_factory: pytest.TempPathFactory, tiny: tuple[str, ...], tiny_install: Path,
            source_cache: Path) -> dict[str, Path]:
    """What would be carried to a runner: tiny's pruned archive with its pruned.json, the wheelhouse (filled by
    tiny_install's build), and no wheels (this machine's Python has conan)."""
    base = tmp_path_factory.mktemp("carry")
    hermetic("source", "prune", *tiny, "--variant", "support", "--output", str(base / "carry"),
             "--cache", str(source_cache))
    (base / "whl").mkdir()
    archive = next((base / "carry").glob("*.tar.xz"))
    return {"source": archive, "wheels": base / "whl", "wheelhouse": source_cache / "wheelhouse"}


def runner(carried: dict[str, Path], base: Path, *extra: str,
           inputs: tuple[str, ...] | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The runner on tiny's `full`; `inputs`: where the builds' inputs come from (the carried archive and
    wheelhouse, or --bundle DIR)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    if inputs is None:
        inputs = ("--source", str(carried["source"]), "--wheelhouse", str(carried["wheelhouse"]))
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.runner", "--llvm-recipe", str(TINY), "--variant", "full", "--toolchain", "host",
         *inputs, "--wheels", str(carried["wheels"]), "--no-wheel", "--commit", "test",
         "--out", str(base / "out"), "--work", str(base / "work"), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    report = json.loads((base / "out" / "report.json").read_text()) if (base / "out" / "report.json").is_file() else {}
    return proc, report


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["status"] for s in report["steps"]}


def test_the_runner_builds_compares_packs_and_reports(carried: dict[str, Path], tmp_path: Path) -> None:
    proc, report = runner(carried, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    assert (out / "done").read_text() == "0\n"
    got = statuses(report)
    assert got["install-wheels"] == "ok" and got["build-support"] == "ok" and got["build-llvm"] == "ok"
    assert got["golden"] == "ok" and got["pack"] == "ok"
    assert got["wheel"] == "skipped" and got["gpu-tests"] == "skipped"
    assert report["gpu_tier"]["status"] == "skipped" and report["gpu_tier"]["reason"]  # no device, or no wheel
    assert report["result"] == "passed" and report["failures"] == [] and report["commit"] == "test"

    # the records beside the report are hermetic's own, and the report says what they say
    for name, key, variant in (("record.json", "llvm", "full"), ("support-record.json", "llvm_support", "support")):
        rec = json.loads((out / name).read_text())
        assert rec["variant"] == variant and report[key]["tree_digest"] == rec["tree"]["digest"]
        assert report["variants"][variant]["inputs_digest"] == rec["inputs_digest"]
        assert report["variants"][variant]["toolchain_id"] == {"name": "host", "kind": "host"}
        # tiny has no golden digest: compared, and said so
        assert report["golden"][variant]["status"] == "no entry"
        assert report["golden"][variant]["entry"] == f"tiny-{variant}-host-{report['llvm']['arch']}"
    assert report["offline"]["requested"] in ("require", "auto") and report["source"]["matches_pruned_json"] is True

    # the packed tree: its parts put together are the archive the report names
    pack = report["install_tree_archive"]
    whole = b"".join((out / p["file"]).read_bytes() for p in pack["parts"])
    assert hashlib.sha256(whole).hexdigest() == pack["sha256"] and len(whole) == pack["size"]

    # again in the same work dir: hermetic keeps both builds, and the steps say so
    proc, again = runner(carried, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert statuses(again)["build-support"] == "done" and statuses(again)["build-llvm"] == "done"
    for variant, first in report["variants"].items():
        second = again["variants"][variant]
        assert {k: second[k] for k in first if k != "step_wall_s"} == {k: v for k, v in first.items() if k != "step_wall_s"}


def test_a_failed_build_fails_its_step_skips_what_needs_it_and_still_reports(carried: dict[str, Path],
                                                                             tmp_path: Path) -> None:
    proc, report = runner(carried, tmp_path, "--variant", "no-such-variant", "--no-support")
    assert proc.returncode == 1 and (tmp_path / "out" / "done").read_text() == "1\n"
    got = statuses(report)
    assert got["build-llvm"] == "failed" and got["pack"] == "skipped" and got["ptxas"] == "skipped"
    step = next(s for s in report["steps"] if s["name"] == "pack")
    assert step["reason"] == "build-llvm failed"
    failure = report["failures"][0]
    assert failure["step"] == "build-llvm" and failure["rc"] != 0
    assert any("no-such-variant" in line for line in failure["output_tail"])  # hermetic's own what/why/fix
    assert report["result"] == "failed"


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory, tiny: tuple[str, ...], source_cache: Path) -> dict[str, str]:
    """`hermetic bundle` of tiny's `full` with the host compiler (about 34 MB: the wheelhouse's CMake is most of it)."""
    base = tmp_path_factory.mktemp("bundle")
    made = hermetic("bundle", *tiny, "--variant", "full", "--toolchain", "host", "--cache", str(source_cache),
                    "--work-dir", str(base / "w"), "--output", str(base / "bundle"), "--quiet", clean=True)
    name, digest, where = made.stdout.split()[:3]
    return {"name": name, "digest": digest, "dir": where}


def test_the_runner_builds_from_a_bundle_carried_in_parts(carried: dict[str, Path], tiny_bundle: dict[str, str],
                                                          tiny_install: Path, tiny_full_install: Path,
                                                          tmp_path: Path) -> None:
    # the device's way: split here, each part stashed out of the checkout, joined and checked there
    made = parts.split(Path(tiny_bundle["dir"]), tmp_path / "parts", 12 * parts.MIB)
    assert len(made) >= 3  # CMake's wheel (30 MB) is cut over parts
    for part in made:
        parts.stash([part], tmp_path / "stash")
    parts.join(tmp_path / "stash", tmp_path / "bundle")

    proc, report = runner(carried, tmp_path, inputs=("--bundle", str(tmp_path / "bundle")))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = statuses(report)
    assert got["bundle"] == "ok" and got["build-support"] == "ok" and got["build-llvm"] == "ok" and got["golden"] == "ok"
    # the report names the bundle by its manifest digest, as `hermetic bundle` printed it
    b = report["bundle"]
    assert (b["manifest_digest"], b["name"], b["variant"]) == (tiny_bundle["digest"], tiny_bundle["name"], "full")
    assert b["built"] == "full" and b["matches_plan"] is True and b["build_inputs_digest"] == report["llvm"]["inputs_digest"]
    assert report["source"] is None and report["options"]["source"] is None and report["options"]["wheelhouse"] is None
    # the same trees as tiny's builds from the source cache
    for variant, rec in (("full", tiny_full_install), ("support", tiny_install)):
        assert report["variants"][variant]["tree_digest"] == json.loads(rec.read_text())["tree"]["digest"], variant
    # the bundle fed a cache of its own: the runner's cache was never used
    cache = tmp_path / "work" / "cache"
    assert not cache.exists() or not any(cache.rglob("*"))
    commands = (tmp_path / "work" / "logs" / "build-llvm.log").read_text()
    assert f"--bundle {tmp_path / 'bundle'}" in commands and "--source" not in commands.split("\n")[0]


def test_a_damaged_bundle_fails_its_step_and_nothing_is_built(carried: dict[str, Path], tiny_bundle: dict[str, str],
                                                              tmp_path: Path) -> None:
    import shutil

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle["dir"], bundle)
    biggest = max((bundle / "blobs" / "sha256").iterdir(), key=lambda p: p.stat().st_size)
    with open(biggest, "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 1]))
    proc, report = runner(carried, tmp_path, inputs=("--bundle", str(bundle)))
    assert proc.returncode == 1
    got = statuses(report)
    assert got["bundle"] == "failed" and got["build-support"] == "skipped" and got["build-llvm"] == "skipped"
    failure = report["failures"][0]
    assert failure["step"] == "bundle" and any(biggest.name[:12] in line for line in failure["output_tail"]), failure


def test_the_dry_run_names_the_bundle_and_the_carried_inputs_are_refused_beside_it(
        carried: dict[str, Path], tiny_bundle: dict[str, str], tmp_path: Path) -> None:
    proc, _ = runner(carried, tmp_path, "--dry-run", inputs=("--bundle", tiny_bundle["dir"]))
    assert proc.returncode == 0, proc.stderr
    assert f"bundle: {tiny_bundle['dir']}: {tiny_bundle['name']} {tiny_bundle['digest']}" in proc.stdout
    assert f"hermetic build llvm --variant full --bundle {tiny_bundle['dir']} --jobs" in proc.stdout
    assert not (tmp_path / "out").exists()
    proc, _ = runner(carried, tmp_path, inputs=("--bundle", tiny_bundle["dir"], "--source", str(carried["source"])))
    assert proc.returncode == 2 and "--source" in proc.stderr and "fix:" in proc.stderr


def test_the_runner_signs_as_a_second_builder(carried: dict[str, Path], tiny_install: Path, tiny_full_install: Path,
                                             tmp_path: Path) -> None:
    """The image of each variant it built, signed as its reference with the runner's own key (and OpenPGP), its
    in-toto links; what comes back (the layout but its layers) with another builder's layers verifies by the runner's
    key and not by another; `hermetic sign LAYOUT --layout OWN` adds the other builder's signature in one command
    (its layers filled in from its own build, 2 of 2 then), and refuses a layout of another image."""
    import shutil

    keys = tmp_path / "keys"
    keys.mkdir()
    hermetic("key", "generate", str(keys / "runner"), "--quiet", clean=True)
    hermetic("key", "generate", str(keys / "other"), "--no-gpg", "--quiet", clean=True)
    proc, report = runner(carried, tmp_path, "--no-pack", "--sign-key", str(keys / "runner.key"),
                          "--gpg-key", str(keys / "runner.gpg.key"), "--identity", "registry.example/tiny/{variant}:1.0.0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert statuses(report)["image"] == "ok" and statuses(report)["sign"] == "ok"
    second, out = report["second_builder"], tmp_path / "out"
    assert len(second["lookaside"]) == 2  # an OpenPGP signature for each image
    for variant, record in (("full", tiny_full_install), ("support", tiny_install)):
        mine = second[variant]
        assert mine["identity"] == f"registry.example/tiny/{variant}:1.0.0"
        assert {n.split(".")[0] for n in mine["links"]} >= {"fetch", "prune", "build", "image"}
        # the other builder: tiny built from the source cache, its image written here: the same digest
        other = tmp_path / f"other-{variant}"
        digest = hermetic("image", "llvm", "--record", str(record), "--output", str(other), "--quiet",
                          clean=True).stdout.split()[1]
        assert mine["image"]["manifest_digest"] == digest, variant
        manifest = json.loads((other / "blobs" / "sha256" / digest[7:]).read_text())
        layers = {d["digest"][7:] for d in manifest["layers"]}
        came = {p.name for p in (out / "signed" / variant / "blobs" / "sha256").iterdir()}
        assert layers and not layers & came and digest[7:] in came  # the manifest came back, no layer did

        # what came back, with the other builder's layers (the same bytes), verifies by the runner's key only
        signed = tmp_path / f"signed-{variant}"
        shutil.copytree(out / "signed" / variant, signed)
        for n in layers:
            shutil.copyfile(other / "blobs" / "sha256" / n, signed / "blobs" / "sha256" / n)
        ok = hermetic("verify", "--key", str(keys / "runner.pub"), str(signed), check=False, clean=True)
        assert ok.returncode == 0 and "signatures OK" in ok.stdout + ok.stderr, ok.stdout + ok.stderr
        refused = hermetic("verify", "--key", str(keys / "other.pub"), str(signed), check=False, clean=True)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr

        # the other builder adds its signature to what came back in one command: its own build fills in the layers
        both = tmp_path / f"both-{variant}"
        shutil.copytree(out / "signed" / variant, both)
        missing = {d["digest"][7:] for d in [manifest["config"], *manifest["layers"]]} - came
        added = hermetic("sign", str(both), "--layout", str(other), "--identity", mine["identity"],
                         "--sign-key", str(keys / "other.key"), check=False, clean=True)
        assert added.returncode == 0, added.stdout + added.stderr
        assert f"{len(missing)} blob(s) of {digest} copied in" in added.stdout
        ok = hermetic("verify", "--key", str(keys / "runner.pub"), "--key", str(keys / "other.pub"), "--threshold", "2",
                      str(both), check=False, clean=True)
        assert ok.returncode == 0 and "2 of 2" in ok.stdout + ok.stderr, ok.stdout + ok.stderr

    # not the image this builder built (its support image offered for the runner's full): refused, nothing copied in
    wrong = tmp_path / "wrong"
    shutil.copytree(out / "signed" / "full", wrong)
    before = sorted(p.name for p in (wrong / "blobs" / "sha256").iterdir())
    no = hermetic("sign", str(wrong), "--layout", str(tmp_path / "other-support"), "--identity",
                  second["full"]["identity"], "--sign-key", str(keys / "other.key"), check=False, clean=True)
    assert no.returncode == 8 and "is not the image you built" in no.stderr and "Traceback" not in no.stderr
    assert sorted(p.name for p in (wrong / "blobs" / "sha256").iterdir()) == before
