"""Every record committed in the repo reads and writes back byte for byte; errors name file, field path and fix."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT
from hermetic.core.errors import ExitCode, VerifyError
from hermetic.model import record

pytestmark = pytest.mark.unit

_LOADERS = {record.RECORD_SCHEMA: record.load_build_record, record.WHEEL_RECORD_SCHEMA: record.load_wheel_record}


def _committed_records() -> list[Path]:
    """The build and wheel records among the tests' committed JSON files (test data, golden files; reports/ is a
    notebook no test reads)."""
    found = []
    for pattern in ("tests/unit/data/*.json", "tests/golden/*.json"):
        for path in sorted(ROOT.glob(pattern)):
            try:
                data = json.loads(path.read_text())
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(data, dict) and data.get("schema") in _LOADERS:
                found.append(path)
    return found


RECORDS = _committed_records()


def test_the_committed_records_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in RECORDS}
    assert {"tests/unit/data/llvm-nvptx-record.json", "tests/golden/llvm-support-host-debian12.record.json"} <= names


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_committed_record_comes_back_byte_identical(path: Path, tmp_path: Path) -> None:
    data = json.loads(path.read_text())
    rec = _LOADERS[data["schema"]](path)
    assert rec.as_json() == data
    again = tmp_path / path.name
    record.write_record(again, rec)
    assert again.read_bytes() == path.read_bytes()
    assert rec.digest() == hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    assert type(rec).from_json(json.loads(again.read_text()), str(again)) == rec


def _nvptx() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "tests/unit/data/llvm-nvptx-record.json").read_text())
    return data


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d["tree"]["files"].__setitem__(3, "x"), "field tree.files[3] is a string, expected an object"),
        (lambda d: d["sources"][0].pop("origin"), "field sources[0].origin is missing"),
        (lambda d: d["pruned"]["from"].__setitem__("sha256", None),
         "field pruned.from.sha256 is null, expected a string"),
        (lambda d: d["toolchain"].__setitem__("conan", 19), "field toolchain.conan is an integer, expected a string"),
        (lambda d: d["test_package"]["ptx"][0].__setitem__("file", []),
         "field test_package.ptx[0].file is a list, expected a string"),
        (lambda d: d.__setitem__("build_commands", "many"), "field build_commands is a string, expected an integer"),
    ],
)
def test_an_error_names_the_file_the_field_path_and_the_fix(change: Any, why: str) -> None:
    data = _nvptx()
    change(data)
    with pytest.raises(VerifyError) as exc:
        record.BuildRecord.from_json(data, "llvm/nvptx/record.json")
    assert (exc.value.what, exc.value.why) == ("llvm/nvptx/record.json is malformed", why)
    assert "hermetic build llvm --force" in exc.value.fix and exc.value.exit_code == ExitCode.VERIFY


def test_a_pruned_description_s_error_says_to_prune_again(tmp_path: Path) -> None:
    path = tmp_path / "pruned.json"
    path.write_text(json.dumps(_nvptx()["pruned"] | {"size": "big"}))
    with pytest.raises(VerifyError) as exc:
        record.load_pruned(path)
    assert exc.value.what == f"{path} is malformed" and exc.value.why == "field size is a string, expected an integer"
    assert "hermetic source prune" in exc.value.fix


def test_keys_older_records_lack_read_as_their_defaults_and_stay_out() -> None:
    data = _nvptx()
    data["compile_cache"] = {"url": "redis+unix:/r.sock", "reachable": "r", "answered": True, "ccache": "c",
                             "ccache_version": "4.7", "stats": None, "note": None}
    data["toolchain_id"] = {"name": "zig", "kind": "zig", "version": None}
    rec = record.BuildRecord.from_json(data)
    assert rec.compile_cache is not None and rec.compile_cache.note == "" and rec.compile_cache.misses_to == ""
    assert rec.toolchain_ref.version == "" and rec.toolchain_ref.as_json() == {"name": "zig", "kind": "zig"}
    assert rec.as_json()["compile_cache"] == {k: v for k, v in data["compile_cache"].items() if k != "note"}
