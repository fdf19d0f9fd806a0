"""Build progress names each ninja phase of one step instead of running the counts together."""

from __future__ import annotations

import io

import pytest

from hermetic.build.sandbox import Progress

pytestmark = pytest.mark.unit


def test_each_ninja_run_is_its_own_phase() -> None:
    buf = io.StringIO()
    p = Progress("llvm-support", False, buf, phases=("compile", "install", "test_package"))
    for line in ("[1/209] cc a", "[209/209] ar b", "[0/4] install", "[4/4] install", "[1/2] cc t", "[2/2] ld t", "[1/1] x"):
        p.line(line)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "llvm-support compile: [1/209] 0%" and lines[1] == "llvm-support compile: [209/209] 100%"
    assert lines[2] == "llvm-support install: [0/4] 0%" and lines[3] == "llvm-support install: [4/4] 100%"
    assert lines[4] == "llvm-support test_package: [1/2] 50%"
    assert lines[-1] == "llvm-support phase 4: [1/1] 100%"


def test_quiet_prints_nothing() -> None:
    buf = io.StringIO()
    p = Progress("x", True, buf, phases=("a",))
    p.line("[1/2] y")
    p.done()
    assert buf.getvalue() == ""
