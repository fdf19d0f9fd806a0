"""Typed records: committed records load and write back byte for byte; a damaged record is a clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, hermetic, resolve_in_project
from hermetic.build import llvm
from hermetic.core.digests import file_sha256
from hermetic.core.errors import ExitCode, UsageError, VerifyError
from hermetic.fetch import prune, sources
from hermetic.model import recipe, record
from schemas.examples import fake_llvm_build, fake_wheel, settings

pytestmark = pytest.mark.unit

# A real record, of an nvptx build on the GPU runner (its tree listing is the largest a test reads).
DATA = Path(__file__).resolve().parent / "data"
NVPTX_RECORD = DATA / "llvm-nvptx-record.json"


def _committed() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(NVPTX_RECORD.read_text())
    return data


def _runner_wheel_record() -> dict[str, Any]:
    """The wheel record of the GPU runner report (which keeps a subset of its keys), the rest as build_wheel writes them."""
    data: dict[str, Any] = json.loads((DATA / "runner-wheel-record.json").read_text())
    return data | {
        "schema": record.WHEEL_RECORD_SCHEMA,
        "wheel": "tilec-0.1.0-cp312-abi3-manylinux_2_38_x86_64.whl",
        "size": 4242,
        "project": {"name": "tilec", "path": "/tmp/hr/repo/src/compiler"},
        "source_date_epoch": 1736812800,
        "wheelhouse": "/tmp/hr/work/hermetic/wheelhouse",
        "recipe_digest": "ff" * 32,
        "machine": "linux-x86_64",
        "toolchain": _committed()["toolchain"],
        "started": "2026-11-22T03:45:00Z",
        "finished": "2026-11-22T03:45:29Z",
    }


# -- round trips ------------------------------------------------------------------------------------------


def test_the_committed_nvptx_record_round_trips_byte_for_byte(tmp_path: Path) -> None:
    data = _committed()
    rec = record.load_build_record(NVPTX_RECORD)
    assert rec.as_json() == data
    assert record.BuildRecord.from_json(rec.as_json()) == rec
    assert rec.schema == record.RECORD_SCHEMA and rec.variant == "nvptx" and rec.jobs == 16
    assert rec.tree.digest == record.tree_digest(rec.tree.files) == data["tree"]["digest"]
    assert rec.tree.size == record.tree_size(rec.tree.files)
    assert rec.pruned is not None and rec.pruned.source.origin == "local-test"
    assert rec.install_dir == Path("/tmp/hr/work/hermetic/llvm/nvptx/install/usr/lib64/llvm-nvptx-19.1.7")
    again = tmp_path / "record.json"
    record.write_record(again, rec)
    assert again.read_bytes() == NVPTX_RECORD.read_bytes()
    assert rec.digest() == record.load_build_record(again).digest()


def test_the_pruned_source_description_round_trips(tmp_path: Path) -> None:
    data = _committed()["pruned"]
    pruned = record.PrunedSource.from_json(data)
    assert pruned.as_json() == data and record.PrunedSource.from_json(pruned.as_json()) == pruned
    path = tmp_path / "pruned.json"
    record.write_record(path, pruned)
    assert record.load_pruned(path) == pruned and json.loads(path.read_text()) == data


def test_a_wheel_record_round_trips(tmp_path: Path) -> None:
    data = _runner_wheel_record()
    wrec = record.WheelRecord.from_json(data, "wheel-record.json")
    assert wrec.as_json() == data
    assert record.WheelRecord.from_json(wrec.as_json()) == wrec
    assert wrec.platform_tag.auditwheel is not None and wrec.platform_tag.auditwheel.external_libs == ()
    assert wrec.llvm.record is not None and wrec.llvm.record.tree_digest == _committed()["tree"]["digest"]
    assert wrec.timings_s.venv_reused is False and wrec.timings_s.total == 29.2
    path = tmp_path / "wheel-record.json"
    record.write_record(path, wrec)
    assert record.load_wheel_record(path) == wrec
    assert path.read_text() == json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_records_of_the_test_fixtures_round_trip(tmp_path: Path) -> None:
    build = fake_llvm_build(tmp_path / "a")
    assert record.load_build_record(build).as_json() == json.loads(build.read_text())
    wheel = fake_wheel(tmp_path / "dist")  # an older shape: no started/finished, a partial toolchain and timings
    path = wheel.with_name("wheel-record.json")
    wrec = record.load_wheel_record(path)
    assert wrec.as_json() == json.loads(path.read_text())
    assert wrec.started is None and wrec.toolchain is not None and wrec.toolchain.conan is None


def test_records_written_before_start_finish_and_toolchain_still_load() -> None:
    data = _committed()
    for key in ("started", "finished", "toolchain"):
        del data[key]
    rec = record.BuildRecord.from_json(data)
    assert (rec.started, rec.finished, rec.toolchain) == (None, None, None)
    assert rec.as_json() == data


# -- damaged records --------------------------------------------------------------------------------------


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("jobs", "16", "field jobs is a string, expected an integer"),
        ("jobs", True, "field jobs is a boolean, expected an integer"),
        ("inputs_digest", _DELETE, "field inputs_digest is missing"),
        ("wall_time_s", None, "field wall_time_s is null, expected a number"),
        ("recipe.digest", 7, "field recipe.digest is an integer, expected a string"),
        ("offline.enforced", "yes", "field offline.enforced is a string, expected true or false"),
        ("options.targets", ["NVPTX"], "field options.targets is a list, expected a string"),
        ("sources", {}, "field sources is an object, expected a list"),
        ("pruned.from", _DELETE, "field pruned.from is missing"),
        ("test_package.ptx", None, "field test_package.ptx is null, expected a list"),
        ("tree.files", "many", "field tree.files is a string, expected a list"),
        ("tree.size", 1.5, "field tree.size is a number, expected an integer"),
    ],
)
def test_a_missing_or_mistyped_field_names_the_file_and_the_field(tmp_path: Path, field: str, value: Any, why: str) -> None:
    data = _committed()
    _set(data, field, value)
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    with pytest.raises(VerifyError) as exc:
        record.load_build_record(path)
    assert exc.value.what == f"{path} is malformed"
    assert exc.value.why == why
    assert "hermetic build llvm --force" in exc.value.fix
    assert exc.value.exit_code == ExitCode.VERIFY == 8


def test_a_damaged_tree_entry_is_named_by_its_index() -> None:
    data = _committed()
    data["tree"]["files"][5]["mode"] = "rwxr-xr-x"
    with pytest.raises(VerifyError, match="malformed") as exc:
        record.BuildRecord.from_json(data, "r.json")
    assert exc.value.why.startswith("field tree.files[5].mode is 'rwxr-xr-x', expected octal")
    data = _committed()
    data["tree"]["files"][6]["type"] = "fifo"
    with pytest.raises(VerifyError) as exc:
        record.BuildRecord.from_json(data, "r.json")
    assert exc.value.why == "field tree.files[6].type is 'fifo', expected file, dir or symlink"
    data = _committed()
    del data["tree"]["files"][6]["sha256"]
    with pytest.raises(VerifyError) as exc:
        record.BuildRecord.from_json(data, "r.json")
    assert exc.value.why == "field tree.files[6].sha256 is missing"


def test_a_mistyped_wheel_record_field_is_named() -> None:
    data = _runner_wheel_record()
    data["build_requirements"]["pinned"][2]["sha256"] = "abc"
    with pytest.raises(VerifyError) as exc:
        record.WheelRecord.from_json(data, "dist/wheel-record.json")
    assert exc.value.what == "dist/wheel-record.json is malformed"
    assert exc.value.why == "field build_requirements.pinned[2].sha256 is a string, expected a list"
    assert "hermetic wheel" in exc.value.fix
    data = _runner_wheel_record()
    data["schema"] = record.RECORD_SCHEMA
    with pytest.raises(UsageError, match="is not a hermetic wheel record"):
        record.WheelRecord.from_json(data, "dist/wheel-record.json")


def test_damaged_json_missing_files_and_other_schemas_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text(NVPTX_RECORD.read_text()[:5000])  # cut off mid-write
    with pytest.raises(VerifyError) as exc:
        record.load_build_record(path)
    assert exc.value.what == f"build record {path} is not valid JSON" and exc.value.exit_code == ExitCode.VERIFY
    assert "--force" in exc.value.fix
    path.write_text("[]")
    with pytest.raises(VerifyError, match="is malformed") as exc:
        record.load_build_record(path)
    assert exc.value.why == "the record is a list, expected an object"
    path.write_text(json.dumps({"schema": "hermetic.build-record/0"}))
    with pytest.raises(VerifyError, match="is not a hermetic build record"):
        record.load_build_record(path)
    with pytest.raises(VerifyError, match="no build record at"):
        record.load_build_record(tmp_path / "nothing.json")
    with pytest.raises(VerifyError, match="no wheel record at"):
        record.load_wheel_record(tmp_path / "nothing.json")


# -- the plan: a damaged record is an error, a stale one a rebuild ------------------------------------


def _archive(tmp_path: Path) -> Path:
    archive = tmp_path / "llvm-project-19.1.7.src.tar.xz"
    archive.write_bytes(b"a source archive (not read: the build never starts)")
    return archive


@pytest.mark.parametrize("damage", ["cut-off", "mistyped"])
def test_a_corrupt_record_fails_the_build_instead_of_rebuilding(tmp_path: Path, damage: str) -> None:
    if damage == "cut-off":
        content, says = '{"schema": "hermetic.build-record/1", "variant": ', "is not valid JSON"
    else:
        content, says = json.dumps(_committed() | {"jobs": "sixteen"}), "field jobs is a string, expected an integer"
    work = tmp_path / "work"
    rec = work / "llvm" / "support" / "record.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(content)
    proc = hermetic(
        "build", "llvm", "--variant", "support", "--source", str(_archive(tmp_path)), "--work-dir", str(work),
        "--offline", "off", check=False,
    )
    assert proc.returncode == ExitCode.VERIFY == 8, proc.stderr
    assert str(rec) in proc.stderr and says in proc.stderr and "--force" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert rec.read_text() == content and sorted(p.name for p in rec.parent.iterdir()) == ["record.json"]


def test_a_stale_or_orphaned_record_is_a_rebuild(tmp_path: Path) -> None:
    s = settings(tmp_path)
    rec = recipe.load(s.recipes_dir)
    variant = recipe.resolve_variant(rec, "support")
    digest = llvm.inputs_digest(rec, variant, llvm.source_identity("path", "ab" * 32))
    built = fake_llvm_build(s.work_dir)  # WORK_DIR/llvm/support/record.json with its tree intact
    data = json.loads(built.read_text())
    assert llvm.finished_build(s, "llvm/support", digest)[0] is None  # other inputs digest: rebuild
    built.write_text(json.dumps(data | {"inputs_digest": digest}))
    found, _ = llvm.finished_build(s, "llvm/support", digest)
    assert found is not None and found == data["tree"]["digest"]
    (Path(data["install_root"]) / "usr" / "lib64" / "llvm-support-19.1.7" / "lib" / "libLLVMSupport.a").write_bytes(b"x")
    assert llvm.finished_build(s, "llvm/support", digest)[0] is None  # the tree changed: rebuild
    built.write_text("{")
    with pytest.raises(VerifyError, match="is not valid JSON"):
        llvm.finished_build(s, "llvm/support", digest)


def test_a_cached_pruned_archive_is_used_where_it_lies(tmp_path: Path) -> None:
    """A cache copied elsewhere (another user's copy, a mount) keeps pruned.json's `path` of where it was
    written: the build must read the verified file in this cache, not that path."""
    rec = recipe.load(ROOT / "recipes")
    variant = recipe.resolve_variant(rec, "support", {})
    src = sources.CachedArchive(rec.archives[0], tmp_path / "release.tar.xz", "test")
    first = resolve_in_project(tmp_path / "a", cli={"cache_dir": str(tmp_path / "first")})
    dest = prune.pruned_path(first.cache_dir, rec, src.archive, variant)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"a pruned archive\n")
    meta = {"file": dest.name, "path": str(dest), "sha256": file_sha256(dest), "size": dest.stat().st_size,
            "key": dest.parent.name, "from": src.as_json(), "variant": "support"}
    dest.with_name("pruned.json").write_text(json.dumps(meta))
    shutil.copytree(tmp_path / "first", tmp_path / "second")
    shutil.rmtree(tmp_path / "first")
    second = resolve_in_project(tmp_path / "b", cli={"cache_dir": str(tmp_path / "second")})
    got = prune.ensure_pruned(second.cache_dir, rec, src, variant, lambda m: None)
    assert got["path"] == str(prune.pruned_path(second.cache_dir, rec, src.archive, variant)) and got["sha256"] == meta["sha256"]
