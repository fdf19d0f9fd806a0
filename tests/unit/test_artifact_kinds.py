"""Artifact kinds: each told from its path once (model/artifacts.py), each action dispatched through one table."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from test_bundle import _write as write_bundle
from test_oci_pull_integrity import tiny_image

from hermetic.__main__ import main
from hermetic.cli.artifacts import KINDS, Row, Unsupported
from hermetic.core.errors import ExitCode, UsageError
from hermetic.model.artifacts import Artifact, Kind, detect
from hermetic.oci.index import merge_layouts
from hermetic.verify.report import Report
from schemas.examples import fake_image, fake_llvm_build, fake_wheel

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ("inspect", "attest", "signatures", "rebuild")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*argv, "--root", str(ROOT)])
    return rc, out.getvalue(), err.getvalue()


def found(path: Path) -> Artifact | None:
    return detect(path, "inspect", "inspect takes …")


# -- detection ------------------------------------------------------------------------------------------------


def test_each_kind_is_told_from_its_path(tmp_path: Path) -> None:
    rec = fake_llvm_build(tmp_path / "w")
    assert found(rec) == Artifact(Kind.LLVM, rec)
    assert found(rec.parent) == Artifact(Kind.LLVM, rec)  # a build directory means its record
    layout = fake_image(rec, tmp_path / "image")
    assert found(layout) == Artifact(Kind.IMAGE, layout)
    amd, _ = tiny_image(tmp_path / "amd", "amd64")
    arm, _ = tiny_image(tmp_path / "arm", "arm64")
    merge_layouts([amd.path, arm.path], tmp_path / "multi")
    assert found(tmp_path / "multi") == Artifact(Kind.IMAGE, tmp_path / "multi")
    bundle = write_bundle(tmp_path)
    assert found(bundle) == Artifact(Kind.BUNDLE, bundle)
    wheel = fake_wheel(tmp_path / "dist")
    for path in (wheel, wheel.parent / "wheel-record.json", wheel.parent):
        assert found(path) == Artifact(Kind.WHEEL, path)
    renamed = tmp_path / "kept-record.json"
    renamed.write_bytes((wheel.parent / "wheel-record.json").read_bytes())
    assert found(renamed) == Artifact(Kind.WHEEL, renamed)  # told by its schema, not its name
    assert found(tmp_path / "nothing") is None  # the caller may read the text as a reference


def _tar(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        tar.add(__file__, arcname="x")


@pytest.mark.parametrize(("name", "make", "words"), [
    ("empty", lambda p: p.mkdir(), "it is an empty directory"),
    ("half", lambda p: (p.mkdir(), (p / "index.json").write_text("{}")), "no oci-layout file"),
    ("other", lambda p: (p.mkdir(), (p / "notes.txt").write_text("x")), "holds no oci-layout, wheel-record.json"),
    ("a.zip", lambda p: zipfile.ZipFile(p, "w").writestr("a", "b"), "zip archive, not a wheel"),
    ("a.tar", _tar, "it is a tar archive"),
    ("a.tar.gz", lambda p: p.write_bytes(gzip.compress(b"x")), "it is a compressed file"),
    ("garbage", lambda p: p.write_bytes(b"\x00\x01 not json"), "it is not JSON"),
    ("other.json", lambda p: p.write_text(json.dumps({"name": "x"})), "JSON but not an LLVM build record"),
    ("list.json", lambda p: p.write_text("[1, 2]"), "JSON but not an LLVM build record"),
])
def test_what_is_no_artifact_is_named(tmp_path: Path, name: str, make: object, words: str) -> None:
    path = tmp_path / name
    make(path)  # type: ignore[operator]
    with pytest.raises(UsageError) as exc:
        detect(path, "verify", "verify takes …")
    assert exc.value.what.startswith(f"cannot verify {path}: ") and words in exc.value.what
    assert exc.value.why == "verify takes …" and exc.value.fix
    rc, _, err = run("inspect", str(path))
    assert rc == ExitCode.USAGE and words in err and "Traceback" not in err


def test_a_file_of_a_layout_points_at_the_layout(tmp_path: Path) -> None:
    layout = fake_image(fake_llvm_build(tmp_path / "w"), tmp_path / "image")
    with pytest.raises(UsageError, match="a file of an OCI image layout") as exc:
        detect(layout / "index.json", "attest", "")
    assert f"hermetic attest {layout}" in exc.value.fix


def test_a_damaged_layout_is_still_a_layout_and_its_reader_says_what_is_wrong(tmp_path: Path) -> None:
    layout = fake_image(fake_llvm_build(tmp_path / "w"), tmp_path / "image")
    (layout / "index.json").unlink()
    assert found(layout) == Artifact(Kind.IMAGE, layout)
    rc, _, err = run("inspect", str(layout))
    assert rc == ExitCode.VERIFY and "index.json is missing" in err and "rewrite the layout" in err
    (layout / "index.json").write_text("[" * 100_000 + "]" * 100_000)
    assert found(layout) == Artifact(Kind.IMAGE, layout)
    bundle = write_bundle(tmp_path)
    manifest = json.loads((bundle / "index.json").read_text())["manifests"][0]["digest"]
    (bundle / "blobs" / "sha256" / manifest.removeprefix("sha256:")).write_text("{")
    assert found(bundle) == Artifact(Kind.IMAGE, bundle)  # whose manifest is unreadable: the image reader refuses it
    assert run("inspect", str(bundle))[0] == ExitCode.VERIFY


# -- the table ------------------------------------------------------------------------------------------------


def test_every_kind_has_a_row_and_every_cell_a_workflow_or_a_reason() -> None:
    assert set(KINDS) == set(Kind)
    for kind, row in KINDS.items():
        assert isinstance(row, Row) and row.title, kind
        for action in ACTIONS:
            cell = getattr(row, action)
            assert callable(cell) or (isinstance(cell, Unsupported) and cell.why and cell.fix), (kind, action)


def test_a_bundle_is_inspected_as_a_bundle(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path)
    for target in (str(bundle), f"oci:{bundle}"):
        rc, out, err = run("inspect", target, "--json")
        assert rc == 0, err
        report = json.loads(out)
        assert report["artifact"]["kind"] == "bundle" and report["artifact"]["name"] == "bundle-test"
        assert [e["role"] for e in report["artifact"]["inputs"]] == ["root", "plan", "pruned", "wheelhouse"]
        assert report["signatures"]["status"] == "unsigned"
    rc, out, _ = run("inspect", str(bundle))
    assert out.startswith("bundle: bundle-test") and "builds:" in out and "built from:" not in out


def test_a_bundle_is_neither_attested_nor_rebuilt_and_nothing_is_written(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path)
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    work = tmp_path / "work"
    rc, _, err = run("attest", str(bundle), "--work-dir", str(work))
    assert rc == ExitCode.USAGE and f"cannot attest {bundle}: it is a bundle" in err and "sign it instead" in err
    rc, _, err = run("verify", str(bundle), "--work-dir", str(work))
    assert rc == ExitCode.USAGE and "nothing in it to rebuild" in err
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before
    assert not work.exists()


def test_verify_key_goes_to_the_kind_s_signature_check(tmp_path: Path) -> None:
    from hermetic.attest import image_signatures, signing
    from hermetic.oci.layout import Layout

    bundle = write_bundle(tmp_path)
    key_path, pub = signing.generate(tmp_path / "a")
    key = signing.load_signing_key(key_path)
    assert key is not None
    image_signatures.sign_layout(Layout(bundle), key, "reg.example/bundles/support:1")
    rc, out, err = run("verify", "--key", str(pub), str(bundle))
    assert rc == 0, err
    assert "signature: bundle" in out and "signatures OK" in out
    # asked to rebuild too, a bundle is refused before any signature is checked
    rc, out, err = run("verify", "--key", str(pub), "--rebuild", str(bundle))
    assert rc == ExitCode.USAGE and "signatures OK" not in out and "nothing in it to rebuild" in err


def test_a_build_record_is_inspected_and_verified_but_not_attested_or_signature_checked(tmp_path: Path) -> None:
    from hermetic.attest import signing

    rec = fake_llvm_build(tmp_path / "w")
    _, pub = signing.generate(tmp_path / "a")
    rc, out, err = run("inspect", str(rec.parent), "--json")
    assert rc == 0, err
    assert json.loads(out)["artifact"]["kind"] == "llvm-install-tree"
    rc, _, err = run("attest", str(rec))
    assert rc == ExitCode.USAGE and "it is an LLVM build record" in err and "hermetic image llvm" in err
    rc, _, err = run("verify", "--key", str(pub), str(rec))
    assert rc == ExitCode.USAGE and f"cannot check the signatures of {rec}" in err


def test_each_command_reaches_the_cell_of_the_detected_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell replaced by one that records (kind, action): each path reaches its own kind's row, no other."""
    from hermetic.attest import signing
    from hermetic.cli import artifacts
    from hermetic.verify.report import Comparison

    calls: list[tuple[Kind, str, Path]] = []

    def row(kind: Kind) -> Row:
        def report(path: Path, *_: object) -> dict[str, object]:
            calls.append((kind, "inspect", path))
            return {"artifact": {"kind": kind.value, "name": "n", "location": "l", "digest": "d"},
                    "built_from": {}, "attestations": {}}

        def rebuild(path: Path, rep: Report, *_: object) -> None:
            calls.append((kind, "rebuild", path))
            rep.comparisons.append(Comparison("x", "sha256:1", "sha256:1"))

        return Row(kind.value, report, ("", ""), lambda path, *_: calls.append((kind, "attest", path)),
                   lambda path, *_: calls.append((kind, "signatures", path)) or [], rebuild)

    monkeypatch.setattr(artifacts, "KINDS", {kind: row(kind) for kind in Kind})
    rec = fake_llvm_build(tmp_path / "w")
    paths = {Kind.LLVM: (rec.parent, rec), Kind.IMAGE: (fake_image(rec, tmp_path / "image"),) * 2,
             Kind.WHEEL: (fake_wheel(tmp_path / "dist"),) * 2, Kind.BUNDLE: (write_bundle(tmp_path),) * 2}
    _, pub = signing.generate(tmp_path / "k")
    for kind, (given, read) in paths.items():
        calls.clear()
        for argv in (("inspect", str(given)), ("attest", str(given)), ("verify", "--key", str(pub), str(given)),
                     ("verify", str(given), "--rebuild-dir", str(tmp_path / "rebuilt"))):
            rc, _, err = run(*argv)
            assert rc == 0, (kind, argv, err)
        assert calls == [(kind, action, read) for action in ACTIONS], kind


def test_a_wheel_without_its_record_is_named_by_every_command(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1-py3-none-any.whl"
    wheel.write_bytes(b"not even a zip")
    assert found(wheel) == Artifact(Kind.WHEEL, wheel)  # by its name: its record says the rest
    for argv in (("inspect", str(wheel)), ("attest", str(wheel)), ("verify", str(wheel))):
        rc, _, err = run(*argv, "--work-dir", str(tmp_path / "w"))
        assert rc == ExitCode.USAGE and "no wheel-record.json beside" in err, (argv, err)
