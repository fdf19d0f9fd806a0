"""Every command, given bad input, ends with a classed exit code and a message, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import ROOT, hermetic
from hermetic.core.errors import ExitCode

pytestmark = pytest.mark.unit

CLASSED = {ExitCode.USAGE, ExitCode.RECIPE, ExitCode.SOURCE, ExitCode.OFFLINE, ExitCode.BUILD,
           ExitCode.REGISTRY, ExitCode.VERIFY, ExitCode.ENVIRONMENT}


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    (d / "file").write_text("a file, not a directory\n")
    (d / "damaged.json").write_text('{"schema": "hermetic.build-record/1", "tree": ')
    (d / "record.json").write_text('{"schema": "hermetic.build-record/1", "tree": ')
    (d / "layout").mkdir()
    (d / "layout" / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (d / "layout" / "index.json").write_text("{not json")
    (d / "wheel.whl").write_bytes(b"PK not a zip")
    return {"file": str(d / "file"), "under_file": str(d / "file" / "sub"), "missing": str(d / "missing"),
            "damaged": str(d / "damaged.json"), "record_dir": str(d), "layout": str(d / "layout"),
            "wheel": str(d / "wheel.whl"), "tmp": str(d)}


CASES = [
    "--work-dir {file} image llvm --variant support",
    "--work-dir {file} build llvm --variant support --source {damaged}",
    "--cache {file} fetch --variant support --no-urls --no-apt",
    "build llvm --variant support --source {missing}",
    "build llvm --variant support --source {damaged} --work-dir {tmp}/w --toolchain host",
    "source prune --variant support --cache {file} --no-urls --no-apt",
    "image llvm --record {missing} --work-dir {tmp}/w",
    "image llvm --record {damaged} --work-dir {tmp}/w",
    "image index {layout} --output {tmp}/idx",
    "push {missing} 127.0.0.1:9/x:y --insecure",
    "push {layout} 127.0.0.1:9/x:y --insecure",
    "pull 'not a ref!' --layout {tmp}/p",
    "pull oci:{missing}:tag --unpack {tmp}/u",
    "verify-tree {missing} --record {damaged}",
    "verify-tree {record_dir} --record {missing}",
    "verify {damaged} --work-dir {tmp}/w",
    "verify {missing}",
    "verify {layout} --work-dir {tmp}/w",
    "verify {wheel} --work-dir {tmp}/w",
    "attest {layout} --work-dir {tmp}/w",
    "attest {wheel}",
    "attest {missing}",
    "inspect {damaged}",
    "inspect {layout}",
    "inspect {wheel}",
    "inspect {missing}",
    "wheel --llvm {missing} --work-dir {tmp}/w",
    "wheel --llvm {file} --work-dir {tmp}/w",
    "wheelhouse --dest {under_file} --no-urls",
    "toolchain slim --toolchain host --work-dir {tmp}/w",
    "toolchain slim --toolchain nosuch --work-dir {tmp}/w",
    "toolchain slim --cache {file}",
    "toolchain slim --no-urls --output {tmp}/slim",
    "toolchain slim --no-urls --output {under_file}",
    "toolchain list --root {missing}",
    "--variant nosuch build llvm",
    "build",
    "source",
    "image",
    "toolchain",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_a_classed_error(case: str, bad: dict[str, str]) -> None:
    import shlex

    argv = shlex.split(case.format(**bad))
    # A cache of its own: a case that downloads (the toolchain, say) must not hand another case a
    # cache that makes its error go away.
    proc = hermetic(*argv, check=False, env={"HERMETIC_CACHE": f"{bad['tmp']}/cache-{CASES.index(case)}"})
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in CLASSED, (proc.returncode, proc.stderr)
    assert "error" in proc.stderr


def test_closed_stdout_is_not_a_traceback(bad: dict[str, str]) -> None:
    """`hermetic inspect X --json | head -1` where the reader has gone before the report is written."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hermetic", "variants"], cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 0


@pytest.mark.parametrize("option", ["--work-dir", "--cache"])
def test_a_file_where_a_directory_belongs_is_refused_before_planning(option: str, bad: dict[str, str]) -> None:
    proc = hermetic(option, bad["file"], "build", "llvm", "--variant", "support", check=False)
    assert proc.returncode == ExitCode.USAGE and "is not a directory" in proc.stderr
    assert "plan:" not in proc.stderr and "Traceback" not in proc.stderr
