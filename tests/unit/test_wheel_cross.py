"""A wheel for another architecture, without building: how a foreign interpreter is recognised (its ELF
header) and run (qemu-user with the root it lives in), which Python runs the build, what tells
scikit-build-core and CMake the target, and the refusals (--arch against the LLVM's record, an
interpreter of the wrong architecture, no Python of the same X.Y here)."""

from __future__ import annotations

import dataclasses
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from hermetic.__main__ import main as cli_main
from hermetic.build import interpreter, llvm_prefix, wheel
from hermetic.core import platforms
from hermetic.core.errors import ExitCode, UsageError
from hermetic.model import record, toolchains
from schemas.examples import PREFIX, ZIG_ID, fake_llvm_build, settings

pytestmark = pytest.mark.unit

ARM64_ZIG = ZIG_ID | {"target": "aarch64-linux-gnu.2.28"}


def _elf(machine: int, little: bool = True) -> bytes:
    """The first 20 bytes of an ELF64 executable of e_machine `machine`."""
    order = "<" if little else ">"
    return b"\x7fELF" + bytes([2, 1 if little else 2, 1]) + bytes(9) + struct.pack(order + "HH", 2, machine)


def _program(path: Path, machine: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_elf(machine) + bytes(64))
    path.chmod(0o755)
    return path


def _target(tmp_path: Path, **changes: Any) -> interpreter.Interpreter:
    """An arm64 CPython 3.11 of a root, as probe_interpreter describes one."""
    root = tmp_path / "root"
    base = interpreter.Interpreter(
        str(root / "usr/bin/python3.11"), "3.11.2", "3.11.2 (main)", "CPython", str(root / "usr/include/python3.11"),
        True, False, True, "arm64", ".cpython-311-aarch64-linux-gnu.so", str(root),
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("header", "machine"),
    [(_elf(62), 62), (_elf(183), 183), (_elf(183, little=False), 183), (b"#!/bin/sh\n" + bytes(20), None),
     (_elf(62)[:19], None)],
)
def test_the_elf_machine_of_a_header(header: bytes, machine: int | None) -> None:
    assert toolchains.elf_machine(header) == machine


def test_a_program_s_platform_and_root(tmp_path: Path) -> None:
    here = toolchains.binary_platform(Path(sys.executable).resolve())
    assert here is not None and here.oci == platforms.machine_arch()
    arm = platforms.PLATFORMS["arm64"]
    py = _program(tmp_path / "root" / "usr" / "bin" / "python3.11", arm.elf_machine)
    assert toolchains.binary_platform(py) == arm
    assert toolchains.binary_platform(tmp_path / "missing") is None
    assert toolchains.program_root(py, arm) is None  # no loader above it
    loader = tmp_path / "root" / arm.loader
    loader.parent.mkdir(parents=True)
    (loader.parent / "aarch64-linux-gnu").mkdir()
    loader.symlink_to("aarch64-linux-gnu/ld-linux-aarch64.so.1")  # dangling as in a root: lexists, not exists
    assert toolchains.program_root(py, arm) == tmp_path / "root"
    link = tmp_path / "elsewhere" / "python"
    link.parent.mkdir()
    link.symlink_to(py)
    assert toolchains.program_root(link, arm) == tmp_path / "root"  # the root of the program, not of the link


def test_a_foreign_interpreter_runs_under_qemu_with_its_root_or_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = next(p for p in platforms.PLATFORMS.values() if p.oci != platforms.machine_arch())
    py = _program(tmp_path / "root" / "usr" / "bin" / "python3.11", other.elf_machine)
    with pytest.raises(UsageError) as exc:
        interpreter.probe_interpreter(str(py))
    assert f"is an {other.oci} program, and no {other.oci} root holds it" in exc.value.what
    assert other.loader in exc.value.why and "tests/debian_root.py" in exc.value.fix
    loader = tmp_path / "root" / other.loader
    loader.parent.mkdir(parents=True, exist_ok=True)
    loader.write_text("")
    qemu = _program(tmp_path / "bin" / other.emulator[0], 0)
    qemu.write_text("#!/bin/sh\nexit 1\n")
    monkeypatch.setenv("PATH", str(qemu.parent))
    runner, root = interpreter.interpreter_runner(str(py))
    assert runner == (str(qemu), "-L", str(tmp_path / "root")) and root == tmp_path / "root"
    assert interpreter.probe_interpreter(str(py)) is None  # the emulator ran and failed: not an interpreter
    # a native interpreter runs as it is
    assert interpreter.interpreter_runner(sys.executable) == ((), None)


def test_cross_settings_name_the_target_s_platform_suffix_and_headers(tmp_path: Path) -> None:
    target = _target(tmp_path)
    env, defines = interpreter.cross_settings(target)
    assert env == {"_PYTHON_HOST_PLATFORM": "linux-aarch64", "SETUPTOOLS_EXT_SUFFIX": ".cpython-311-aarch64-linux-gnu.so"}
    assert dict(defines) == {f"{p}_INCLUDE_DIR": target.include for p in ("Python", "Python3", "PYTHON")}
    assert interpreter.cross_settings(interpreter.current_interpreter()) == ({}, [])


def test_the_build_runs_on_a_python_of_this_machine_of_the_same_version(tmp_path: Path) -> None:
    current = interpreter.current_interpreter()
    assert interpreter.build_interpreter(current) is current  # native: itself
    same = _target(tmp_path, version=f"{sys.version_info[0]}.{sys.version_info[1]}.0")
    assert interpreter.build_interpreter(same, str(tmp_path)).executable == current.executable
    other = _target(tmp_path, version="3.99.0")
    with pytest.raises(UsageError, match=r"no Python 3\.99 of this") as exc:
        interpreter.build_interpreter(other, str(tmp_path))
    assert "put python3.99 on PATH" in exc.value.fix


def test_the_zig_toolchain_file_of_a_cross_build_sets_the_target_system(tmp_path: Path) -> None:
    s = settings(tmp_path)
    arm = toolchains.select(toolchains.load(s.toolchain_dir), "zig", None, "aarch64")
    job = wheel.WheelJob(tmp_path, llvm_prefix.LLVMPrefix(tmp_path, tmp_path, "19.1.7"), tmp_path, tmp_path,
                         None, None, 0, s.toolchain_dir / "reproducible.cmake",  # type: ignore[arg-type]
                         toolchain=arm, python=_target(tmp_path), build_python=interpreter.current_interpreter())
    text = wheel._zig_toolchain_file(job, tmp_path / "zig-tools.cmake", tmp_path / "t.cmake").read_text()
    assert "set(CMAKE_SYSTEM_NAME Linux)" in text and "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in text
    assert job.runner.executable == interpreter.current_interpreter().executable
    native = dataclasses.replace(job, python=interpreter.current_interpreter(), build_python=None)
    assert "CMAKE_SYSTEM_NAME" not in wheel._zig_toolchain_file(native, tmp_path / "z", tmp_path / "n.cmake").read_text()


def test_an_interpreter_of_another_architecture_than_the_llvm_s_is_refused(tmp_path: Path) -> None:
    s = settings(tmp_path)
    catalog = toolchains.load(s.toolchain_dir)
    arm = toolchains.select(catalog, "zig", None, "aarch64")
    amd = toolchains.select(catalog, "zig", None, "x86_64")
    with pytest.raises(UsageError, match="is an amd64 interpreter; this wheel is for arm64") as exc:
        interpreter.usable(dataclasses.replace(_target(tmp_path), arch="amd64", root=""), arm)
    assert "qemu-user" in exc.value.fix
    with pytest.raises(UsageError, match="is an arm64 interpreter; this wheel is for amd64"):
        interpreter.usable(_target(tmp_path), amd)


def test_arch_must_be_the_llvm_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel, "require_wheelhouse", lambda *a: None)
    prefix = fake_llvm_build(tmp_path / "arm", toolchain_id=ARM64_ZIG).parent / "install" / PREFIX
    here = settings(tmp_path)
    if here.arch == "arm64":
        pytest.skip("this machine is arm64: the arm64 tree is native")
    with pytest.raises(UsageError, match=f"is for arm64, the wheel for --arch {here.arch}") as exc:
        wheel.plan(here, None, prefix, None, tmp_path / "house")
    assert "pass --arch arm64" in exc.value.fix and "defaults to this machine's" in exc.value.why
    # --arch arm64 with this machine's Python: the interpreter is refused, before anything runs
    with pytest.raises(UsageError, match="interpreter; this wheel is for arm64"):
        wheel.plan(dataclasses.replace(here, arch="arm64"), None, prefix, None, tmp_path / "house")
    # the command line: --arch arm64 without --python says what to pass; exit 2, nothing built
    rc = cli_main(["wheel", "--llvm", str(prefix), "--arch", "arm64", "--root", str(here.root),
                   "--cache", str(tmp_path / "c"), "--work-dir", str(tmp_path / "w")])
    assert rc == ExitCode.USAGE and not (tmp_path / "w" / "wheel").exists()


def test_a_cross_built_wheel_s_record_keeps_both_interpreters() -> None:
    info = record.PythonInfo("3.11.2", "CPython", "cp311-cp311", "/r/usr/bin/python3.11", "arm64", "/usr/bin/python3.11")
    data = info.as_json()
    assert data["arch"] == "arm64" and data["build_executable"] == "/usr/bin/python3.11"
    native = record.PythonInfo("3.11.2", "CPython", "cp311-cp311", "/usr/bin/python3.11")
    assert set(native.as_json()) == {"version", "implementation", "tag", "executable"}
