"""`hermetic verify` before and after the rebuild, without building anything: what it refuses, what it reports.

The rebuilds themselves are in test_verify_llvm.py and test_verify_wheel.py;
here diffoscope (Debian's diffoscope-minimal) runs on small outputs.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from helpers import hermetic
from hermetic.attest import attach as attest
from hermetic.model import record
from hermetic.oci import referrers
from hermetic.oci.layout import Layout
from hermetic.verify import differences
from hermetic.verify import rebuild as verify
from schemas.examples import fake_image, fake_llvm_build, settings


def _need_diffoscope() -> None:
    if shutil.which("diffoscope") is None:
        pytest.fail("diffoscope is missing: apt-get install --no-install-recommends diffoscope-minimal (.ci/setup)")


def test_a_record_from_another_recipe_is_refused_before_building(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "w")  # its recipe digest is not this checkout's
    rebuild = tmp_path / "rebuild"
    proc = hermetic("verify", str(rec), "--rebuild-dir", str(rebuild), "--cache", str(tmp_path / "c"), check=False)
    assert proc.returncode == 8, proc.stderr
    assert "the recipe in this checkout is not the one the artifact was built with" in proc.stderr
    assert "check out the commit" in proc.stderr and "Traceback" not in proc.stderr
    assert not rebuild.exists() or not any(rebuild.iterdir())


def test_rebuild_dir_must_be_elsewhere(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "w")
    inside = Path(json.loads(rec.read_text())["install_root"]) / "x"
    proc = hermetic("verify", str(rec), "--rebuild-dir", str(inside), check=False)
    assert proc.returncode == 2 and "overlaps the original" in proc.stderr
    proc = hermetic("verify", str(tmp_path / "nothing.txt"), check=False)
    assert proc.returncode == 2 and "cannot verify" in proc.stderr


def test_provenance_describes_the_same_build_as_the_record(tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "w")
    layout = fake_image(rec_path, tmp_path / "image")
    attest.attest_image(settings(tmp_path), layout, rec_path)
    facts, _ = attest.image_facts(Layout(layout))
    st = json.loads(referrers.referrers(Layout(layout), artifact_type="application/vnd.in-toto+json")[0].read())
    spec = verify._llvm_spec_from_provenance(st, facts.labels)
    rec = record.load_build_record(rec_path)
    for key in ("variant", "options", "source_date_epoch", "inputs_digest", "prefix"):
        assert getattr(spec, key) == getattr(rec, key), key
    assert spec.recipe_digest == rec.recipe.digest
    assert spec.sources == rec.sources
    assert spec.pruned is not None and rec.pruned is not None
    assert (spec.pruned.sha256, spec.pruned.file) == (rec.pruned.sha256, rec.pruned.file)
    assert spec.tree_digest == rec.tree.digest


def test_diffoscope_names_the_differing_files(tmp_path: Path) -> None:
    _need_diffoscope()
    a, b = tmp_path / "a", tmp_path / "b"
    for d, stamp in ((a, ""), (b, "/* built at 1712345678 */\n")):
        (d / "include" / "llvm").mkdir(parents=True)
        (d / "include" / "llvm" / "same.h").write_text("#pragma once\n")
        (d / "include" / "llvm" / "config.h").write_text("#define X 1\n" + stamp)
    got = differences.run_diffoscope(a, b, tmp_path / "out")
    assert got["ran"] and got["exit"] == 1
    assert [f["path"] for f in got["files"]] == ["include/llvm/config.h"]
    assert "+/* built at 1712345678 */" in got["files"][0]["diff"]
    assert "config.h" in Path(got["report"]).read_text()

    wheels = []
    for d, data in ((a, b"one"), (b, b"two")):
        w = d / "pkg-1-py3-none-any.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr("pkg/__init__.py", "")
            z.writestr("pkg/data.txt", data)
        wheels.append(w)
    got = differences.run_diffoscope(wheels[0], wheels[1], tmp_path / "out2")
    assert any(f["path"].endswith("pkg/data.txt") for f in got["files"]), got["files"]
    assert differences.listing_differences(differences.zip_listing(wheels[0]), differences.zip_listing(wheels[1])) == [
        "differs (sha256): pkg/data.txt"
    ]
    missing = differences.run_diffoscope(tmp_path / "gone", b, tmp_path / "out3")
    assert missing["ran"] is False and "not on this machine" in missing["why"]


def test_report_rendering(tmp_path: Path) -> None:
    r = verify.Report("rec.json", "llvm", tmp_path / "rb")
    r.conditions = {"rebuild_dir": str(tmp_path / "rb"), "umask": "0027", "original_umask": "0022",
                    "rebuild_started": "2026-01-01T00:00:10Z", "original_finished": "2026-01-01T00:00:00Z",
                    "source_date_epoch": 1736812800}
    r.comparisons = [verify.Comparison("install tree", "sha256:aa", "sha256:aa")]
    text = r.render()
    assert "recorded sha256:aa" in text and "rebuilt  sha256:aa  match" in text and "verify: OK" in text
    assert r.as_json()["match"] is True
    r.comparisons.append(verify.Comparison("image manifest", "sha256:bb", "sha256:cc"))
    r.differences = ["differs (sha256): usr/x.h"]
    r.entries = 3
    r.diffoscope = {"ran": True, "summary": "1 differing item(s)", "report": "d.txt",
                    "files": [{"path": "usr/x.h", "diff": "@@ -1 +1 @@\n-a\n+b\n"}]}
    text = r.render()
    assert "DIFFERS" in text and "differing files (1 of 3 entries)" in text and "── usr/x.h" in text
    assert "+b" in text and "MISMATCH" in text and r.as_json()["match"] is False


def test_an_image_is_rebuilt_from_its_record_else_from_its_provenance(tmp_path: Path) -> None:
    rec_path = fake_llvm_build(tmp_path / "w")  # lies at WORK_DIR/llvm/support/record.json for work dir tmp/w
    layout = fake_image(rec_path, tmp_path / "image")
    facts, _ = attest.image_facts(Layout(layout))
    with_record = dataclasses.replace(settings(tmp_path), work_dir=tmp_path / "w")
    spec, source = verify._image_spec(with_record, Layout(layout), facts, None)
    assert source == str(rec_path) and spec.tree_files
    empty = settings(tmp_path / "elsewhere")
    proc = hermetic("verify", str(layout), "--work-dir", str(tmp_path / "elsewhere"), check=False)
    assert proc.returncode == 2 and "nothing says what" in proc.stderr and "--with-attestations" in proc.stderr
    attest.attest_image(settings(tmp_path), layout, rec_path)
    spec, source = verify._image_spec(empty, Layout(layout), facts, None)
    assert source.startswith("provenance sha256:") and spec.variant == "support"
