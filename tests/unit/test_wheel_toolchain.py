"""Wheels and the pinned toolchain, without building: which toolchain a wheel gets (the LLVM's record decides),
the refusals, the manylinux tag of a glibc floor, the interpreter's tags, the self-containment check of an
extension (on small .so files compiled here), the record, SBOM, provenance and verify of a zig wheel."""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermetic.__main__ import main as cli_main
from hermetic.attest import attach as attest
from hermetic.attest import provenance, sbom
from hermetic.build import interpreter, llvm_prefix, wheel, wheel_tag, wheelfile
from hermetic.core.errors import BuildError, EnvironmentError_, ExitCode, UsageError, VerifyError
from hermetic.model import record, toolchains
from hermetic.model.settings import Settings
from hermetic.verify import rebuild as verify
from schemas import cyclonedx
from schemas.examples import PREFIX, ZIG_ID, fake_llvm_build, fake_wheel, settings

pytestmark = pytest.mark.unit

HOST_ID = {"name": "host", "kind": "host"}


def _llvm(tmp_path: Path, toolchain_id: dict[str, str] | None) -> Path:
    """The prefix of a fake hermetic LLVM build whose record names `toolchain_id` (None: an old host record)."""
    rec = fake_llvm_build(tmp_path / "llvm-work", toolchain_id=toolchain_id)
    return rec.parent / "install" / PREFIX


def _with(s: Settings, **changes: Any) -> Settings:
    return dataclasses.replace(s, **changes)


def _zig(target: str = "x86_64-linux-gnu.2.28", **changes: str) -> dict[str, str]:
    return ZIG_ID | {"target": target} | changes


# --- which toolchain: the LLVM's record decides -------------------------------------------------


def test_the_llvm_record_decides_the_toolchain(tmp_path: Path) -> None:
    s = settings(tmp_path)
    tc = llvm_prefix.wheel_toolchain(s, Path("/p"), record.ToolchainRef.from_mapping(ZIG_ID))
    assert tc.kind == "zig" and tc.identity() == ZIG_ID
    # a --glibc 2.17 LLVM gives a 2.17 wheel
    tc = llvm_prefix.wheel_toolchain(s, Path("/p"), record.ToolchainRef.from_mapping(_zig("x86_64-linux-gnu.2.17")))
    assert tc.target == "x86_64-linux-gnu.2.17" and tc.glibc == "2.17"
    assert llvm_prefix.wheel_toolchain(s, Path("/p"), record.HOST_TOOLCHAIN).kind == "host"
    # saying the same is fine
    assert llvm_prefix.wheel_toolchain(_with(s, toolchain="zig", glibc="2.28"), Path("/p"),
                                 record.ToolchainRef.from_mapping(ZIG_ID)).identity() == ZIG_ID


@pytest.mark.parametrize(
    ("asked", "built", "names"),
    [
        ({"toolchain": "host"}, ZIG_ID, ["--toolchain host", "zig 0.17.1", "x86_64-linux-gnu.2.28"]),
        ({"toolchain": "zig"}, HOST_ID, ["--toolchain zig", "its record says host"]),
        ({"glibc": "2.17"}, ZIG_ID, ["--glibc 2.17", "x86_64-linux-gnu.2.28"]),
        ({"toolchain": "zig", "glibc": "2.28"}, _zig("x86_64-linux-gnu.2.17"), ["--glibc 2.28", "x86_64-linux-gnu.2.17"]),
    ],
)
def test_another_toolchain_than_the_llvm_s_is_refused_naming_both(
    tmp_path: Path, asked: dict[str, str], built: dict[str, str], names: list[str]
) -> None:
    with pytest.raises(UsageError) as exc:
        llvm_prefix.wheel_toolchain(_with(settings(tmp_path), **asked), Path("/some/llvm"), record.ToolchainRef.from_mapping(built))
    text = f"{exc.value.what} {exc.value.why}"
    for n in names:
        assert n in text, (n, text)
    assert "/some/llvm" in exc.value.what and "the LLVM's record decides" in exc.value.fix


def test_plan_refuses_the_conflict_before_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _llvm(tmp_path, ZIG_ID)
    with pytest.raises(UsageError, match="--toolchain host is not the toolchain"):
        wheel.plan(_with(settings(tmp_path), toolchain="host"), None, prefix, None, tmp_path / "no-wheelhouse")
    # through the command line: exit 2, both named, no traceback, nothing built
    rc = cli_main(["wheel", "--llvm", str(prefix), "--toolchain", "host", "--root", str(settings(tmp_path).root),
                   "--cache", str(tmp_path / "c"), "--work-dir", str(tmp_path / "w")])
    assert rc == ExitCode.USAGE and not (tmp_path / "w" / "wheel").exists()


def test_plan_takes_the_toolchain_from_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel, "require_wheelhouse", lambda *a: None)
    job = wheel.plan(settings(tmp_path), None, _llvm(tmp_path / "z", ZIG_ID), None, tmp_path / "house")
    assert job.toolchain.identity() == ZIG_ID
    assert job.llvm_record is not None and job.llvm_record.variant == "support"
    old = wheel.plan(settings(tmp_path), None, _llvm(tmp_path / "h", None), None, tmp_path / "house")
    assert old.toolchain.kind == "host"  # a record without toolchain_id: a host build


def test_another_zig_than_the_pinned_one_is_refused_but_new_wrappers_are_not(tmp_path: Path) -> None:
    s = settings(tmp_path)
    other = record.ToolchainRef.from_mapping(ZIG_ID | {"sha256": "0" * 64, "version": "0.16.0"})
    with pytest.raises(UsageError, match="another zig than this checkout pins") as exc:
        llvm_prefix.wheel_toolchain(s, Path("/p"), other)
    assert "0.16.0" in exc.value.why and "0.17.1" in exc.value.why
    # the wrappers and the unpack layout change how the same compiler is called, not what it links
    older = record.ToolchainRef.from_mapping(ZIG_ID | {"wrappers": "1"})
    assert llvm_prefix.wheel_toolchain(s, Path("/p"), older).identity() == ZIG_ID


def test_without_a_record_the_selected_toolchain_is_used_with_a_warning(tmp_path: Path) -> None:
    said: list[str] = []
    tc = llvm_prefix.wheel_toolchain(_with(settings(tmp_path), toolchain="zig", glibc="2.17"), Path("/usr/lib/llvm-19"), None, said.append)
    assert tc.target == "x86_64-linux-gnu.2.17"
    assert len(said) == 1 and "warning" in said[0] and "/usr/lib/llvm-19" in said[0] and "(selected)" in said[0]
    said.clear()
    # not the default (zig): an LLVM hermetic did not build was built by some host compiler
    assert llvm_prefix.wheel_toolchain(settings(tmp_path), Path("/x"), None, said.append).name == "host"
    assert "no record names a pinned toolchain" in said[0]


# --- tags --------------------------------------------------------------------------------------


def test_the_manylinux_tag_of_a_glibc_floor() -> None:
    assert wheelfile.manylinux_platform("2.28", "x86_64") == "manylinux_2_28_x86_64"
    assert wheelfile.manylinux_platform("2.17", "aarch64") == "manylinux_2_17_aarch64"


def _interp(version: str, free_threaded: bool = False, implementation: str = "CPython") -> interpreter.Interpreter:
    return interpreter.Interpreter(f"/x/python{version}", version, version, implementation, "/x/include", True, free_threaded)


@pytest.mark.parametrize(
    ("version", "api", "free_threaded", "tag"),
    [
        ("3.11.7", "cp312", False, "cp311-cp311"),
        ("3.12.1", "cp312", False, "cp312-abi3"),
        ("3.13.0", "cp312", False, "cp312-abi3"),  # the stable ABI of 3.12, built by a newer interpreter
        ("3.13.0", "cp312", True, "cp313-cp313t"),  # free-threaded builds have no stable ABI
        ("3.12.1", "", False, "cp312-cp312"),
    ],
)
def test_interpreter_tags(version: str, api: str, free_threaded: bool, tag: str) -> None:
    assert _interp(version, free_threaded).tag(api) == tag


def test_the_project_s_py_api_and_the_current_interpreter() -> None:
    assert interpreter.project_py_api(Path(__file__).resolve().parents[2] / "src" / "compiler") == "cp312"
    cur = interpreter.current_interpreter()
    assert cur.xy == sys.version_info[:2] and cur.executable
    probed = interpreter.probe_interpreter(sys.executable)
    assert probed is not None and probed.build == cur.build and probed.headers == cur.headers
    assert interpreter.probe_interpreter("/nonexistent/python3") is None


def test_unusable_interpreters_are_refused_before_building(tmp_path: Path) -> None:
    zig = toolchains.for_root(settings(tmp_path).root, "zig")
    host = toolchains.for_root(settings(tmp_path).root, "host")
    # Debian's multiarch pyconfig.h: usable with zig only where the arch's own header is there
    inc = tmp_path / "include" / "python3.11"
    inc.mkdir(parents=True)
    (inc / "pyconfig.h").write_text("#if defined(__x86_64__)\n# include <x86_64-linux-gnu/python3.11/pyconfig.h>\n"
                                    "#elif defined(__aarch64__)\n# include <aarch64-linux-gnu/python3.11/pyconfig.h>\n#endif\n")
    debian = dataclasses.replace(_interp("3.11.2"), multiarch=True, include=str(inc))
    with pytest.raises(UsageError, match="headers cannot be used with zig") as exc:
        interpreter.usable(debian, zig)
    assert "multiarch" in exc.value.why
    real = tmp_path / "include" / "x86_64-linux-gnu" / "python3.11" / "pyconfig.h"
    real.parent.mkdir(parents=True)
    real.write_text("#define X 1\n")
    interpreter.usable(debian, zig)
    assert interpreter.multiarch_pyconfig(debian, zig) == ("x86_64-linux-gnu/python3.11/pyconfig.h", real)
    interpreter.usable(debian, host)  # the host compiler searches /usr/include
    with pytest.raises(UsageError, match="no development headers"):
        interpreter.usable(dataclasses.replace(_interp("3.12.1"), headers=False), host)
    with pytest.raises(UsageError, match="is PyPy"):
        interpreter.usable(_interp("3.10.0", implementation="PyPy"), host)
    with pytest.raises(UsageError, match=r"no python9\.99 on PATH"):
        interpreter.resolve_interpreter("9.99", str(tmp_path))


def test_python_without_a_value_lists_the_interpreters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(settings(tmp_path).root)
    assert cli_main(["wheel", "--python", "--root", root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "wheel.py-api: cp312" in lines[0]
    mine = [ln for ln in lines if "(default: runs hermetic)" in ln]
    cur = interpreter.current_interpreter()
    assert len(mine) == 1 and cur.executable in mine[0] and f"tag {cur.tag('cp312')}" in mine[0]
    assert cli_main(["wheel", "--root", root]) == ExitCode.USAGE
    assert "needs --llvm" in capsys.readouterr().err


# --- is the extension self-contained ---------------------------------------------------------------


def test_parsers_of_the_elf_listings() -> None:
    dyn = """
 0x0000000000000001 (NEEDED)             Shared library: [libc++.so.1]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000000e (SONAME)             Library soname: [x.so]
"""
    assert wheelfile.needed_libraries(dyn) == ["libc++.so.1", "libc.so.6"]
    nm = (
        "0000000000001139 T PyInit__core\n"
        "0000000000002000 V typeinfo for std::__1::basic_string<char, std::__1::char_traits<char>>\n"
        "0000000000003000 T __cxa_throw\n"
        "0000000000004000 T my::thing(int)\n"
        "0000000000005000 W _Unwind_Resume\n"
    )
    names = wheelfile.defined_dynamic_symbols(nm)
    assert names[0] == "PyInit__core" and len(names) == 5
    assert wheelfile.cxx_runtime_exports(names) == [names[1], "__cxa_throw", "_Unwind_Resume"]
    sections = "  [27] .debug_info       PROGBITS  0 0 0\n  [28] .debug_str  PROGBITS 0 0 0\n  [29] .symtab  SYMTAB\n"
    assert wheelfile.debug_sections(sections) == [".debug_info", ".debug_str"]


def _compile_so(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    """A small shared object built by the host compiler (which CI has: the host toolchain builds with it)."""
    lang = "c++" if "std::" in source else "c"
    src = tmp_path / f"{name}.{'cpp' if lang == 'c++' else 'c'}"
    src.write_text(source)
    out = tmp_path / f"{name}.so"
    compiler = shutil.which("g++" if lang == "c++" else "gcc") or shutil.which("c++" if lang == "c++" else "cc")
    assert compiler, "the host compiler is part of the set-up (.ci/setup)"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", *flags, str(src), "-o", str(out)], check=True, capture_output=True)
    return out


def test_a_self_contained_extension_passes(tmp_path: Path) -> None:
    clean = _compile_so(
        tmp_path, "clean", "__attribute__((visibility(\"default\"))) int PyInit_clean(void) { return 1; }\n",
        "-fvisibility=hidden", "-g0",
    )
    assert wheelfile.extension_problems(clean, "2.17") == []


def test_a_host_cxx_extension_with_debug_info_and_a_new_glibc_fails_each_check(tmp_path: Path) -> None:
    leaky = _compile_so(
        tmp_path, "leaky",
        "#include <string>\n#include <sys/random.h>\n"
        "std::string name(int n) { char b[4]; getrandom(b, sizeof b, 0); return std::to_string(n) + b[0]; }\n",
        "-g",
    )
    problems = wheelfile.extension_problems(leaky, "2.17")
    text = "\n".join(problems)
    assert "needs libstdc++.so.6" in text
    assert "symbol(s) of the C++ standard library" in text and "std::" in text
    assert "needs GLIBC_2.25, above the target's floor 2.17" in text  # getrandom is GLIBC_2.25
    assert "GLIBCXX_" in text
    assert ".debug_info" in text


def test_the_zig_toolchain_file_includes_reproducible_and_the_archiver_and_strips_debug(tmp_path: Path) -> None:
    s = settings(tmp_path)
    job = wheel.WheelJob(tmp_path, llvm_prefix.LLVMPrefix(tmp_path, tmp_path, "19.1.7"), tmp_path, tmp_path,
                         None, None, 0, s.toolchain_dir / "reproducible.cmake",  # type: ignore[arg-type]
                         toolchain=toolchains.for_root(s.root, "zig"))
    text = wheel._zig_toolchain_file(job, tmp_path / "zig-tools.cmake", tmp_path / "t.cmake").read_text()
    assert f'include("{s.toolchain_dir / "reproducible.cmake"}")' in text
    assert f'include("{tmp_path / "zig-tools.cmake"}")' in text
    assert "-Wl,--strip-debug" in text and "MODULE" in text


# --- the record, its SBOM and provenance, verify ------------------------------------------------------


def test_a_zig_wheel_record_round_trips_and_an_old_one_reads_as_host(tmp_path: Path) -> None:
    path = fake_wheel(tmp_path / "zig", toolchain_id=ZIG_ID).with_name("wheel-record.json")
    data = json.loads(path.read_text())
    data["python"]["executable"] = "/usr/bin/python3.12"
    wrec = record.WheelRecord.from_json(data)
    assert wrec.as_json() == data and wrec.toolchain_ref.as_json() == ZIG_ID
    assert wrec.python.executable == "/usr/bin/python3.12"
    old = record.load_wheel_record(fake_wheel(tmp_path / "old").with_name("wheel-record.json"))
    assert old.toolchain_id is None and old.toolchain_ref == record.HOST_TOOLCHAIN and old.python.executable is None
    assert "toolchain_id" not in old.as_json() and "executable" not in old.as_json()["python"]


def _documents(tmp_path: Path, toolchain_id: dict[str, str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    whl = fake_wheel(tmp_path / "dist", toolchain_id=toolchain_id)
    sbom_path, prov_path = attest.attest_wheel(settings(tmp_path), whl)
    return json.loads(sbom_path.read_text()), json.loads(prov_path.read_text())


def test_a_zig_wheel_s_sbom_and_provenance_name_the_pinned_toolchain(tmp_path: Path) -> None:
    bom, st = _documents(tmp_path, ZIG_ID)
    assert cyclonedx.errors(bom) == []
    tools = {c["bom-ref"]: c for c in bom["formulation"][0]["components"]}
    zig = tools["wheel-toolchain:ziglang-0.17.1"]
    assert zig["hashes"] == [{"alg": "SHA-256", "content": ZIG_ID["sha256"]}] and zig["purl"] == "pkg:pypi/ziglang@0.17.1"
    assert sbom.property_of(zig, "toolchain.glibc") == "2.28"
    flow = next(w for w in bom["formulation"][0]["workflows"] if w["bom-ref"] == "workflow:wheel")
    props = {p["name"].removeprefix(sbom.PROP): p["value"] for p in flow["properties"]}
    assert props["toolchain"] == "zig 0.17.1" and props["toolchain.target"] == "x86_64-linux-gnu.2.28"
    assert provenance.check_statement(st) == []
    bd = st["predicate"]["buildDefinition"]
    assert bd["externalParameters"]["toolchain"] == ZIG_ID
    deps = [d for d in bd["resolvedDependencies"] if d["name"] == "toolchain:ziglang-0.17.1"]
    assert len(deps) == 1 and deps[0]["digest"] == {"sha256": ZIG_ID["sha256"]}


def test_a_host_wheel_s_documents_say_host(tmp_path: Path) -> None:
    bom, st = _documents(tmp_path, None)
    assert not any("toolchain:" in c["bom-ref"] for c in bom["formulation"][0]["components"])
    bd = st["predicate"]["buildDefinition"]
    assert bd["externalParameters"]["toolchain"] == HOST_ID
    assert not any(d["name"].startswith("toolchain:") for d in bd["resolvedDependencies"])


def test_verify_rebuilds_a_wheel_with_its_recorded_toolchain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Settings] = []

    class Stop(Exception):
        pass

    def plan(s: Settings, *args: Any, **kwargs: Any) -> Any:
        seen.append(s)
        raise Stop

    monkeypatch.setattr(wheel, "plan", plan)
    whl = fake_wheel(tmp_path / "dist", toolchain_id=_zig("x86_64-linux-gnu.2.17"))
    rec_path = whl.with_name("wheel-record.json")
    data = json.loads(rec_path.read_text())
    data["python"]["version"] = platform.python_version()  # an interpreter this machine has
    rec_path.write_text(json.dumps(data))
    report = verify.Report(str(whl), "wheel", tmp_path / "rebuild")
    with pytest.raises(Stop):
        verify.verify_wheel(_with(settings(tmp_path), toolchain="host"), whl, report, lambda m: None)
    assert (seen[0].toolchain, seen[0].glibc) == ("zig", "2.17")  # the record's, whatever was asked
    assert report.conditions["toolchain"] == "zig 0.17.1 x86_64-linux-gnu.2.17"
    # a record of a zig this checkout does not pin is refused before anything is built
    other = fake_wheel(tmp_path / "other", toolchain_id=ZIG_ID | {"sha256": "0" * 64})
    with pytest.raises(VerifyError, match="not the one the artifact was built with"):
        verify.verify_wheel(settings(tmp_path), other, verify.Report(str(other), "wheel", tmp_path / "r2"), lambda m: None)
    assert len(seen) == 1


def _fake_auditwheel(tmp_path: Path, body: str) -> str:
    tool = tmp_path / "auditwheel"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return str(tool)


def test_auditwheel_repair_sets_the_tag_or_says_why_not(tmp_path: Path) -> None:
    raw = tmp_path / "p-0.1.0-cp311-cp311-linux_x86_64.whl"
    raw.write_bytes(b"")
    env = {"PATH": "/usr/bin:/bin"}
    # auditwheel names a policy with its alias: the 2.17 floor's wheel is manylinux2014 too
    writes = _fake_auditwheel(tmp_path, ': > "$8/p-0.1.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"\n')
    got = wheel_tag.auditwheel_repair(writes, raw, "manylinux_2_17_x86_64", tmp_path / "out", env, (), tmp_path / "log")
    assert got.name == "p-0.1.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    wrong = _fake_auditwheel(tmp_path, ': > "$8/p-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl"\n')
    with pytest.raises(BuildError, match="wrote"):
        wheel_tag.auditwheel_repair(wrong, raw, "manylinux_2_28_x86_64", tmp_path / "out", env, (), tmp_path / "log")
    refuses = _fake_auditwheel(
        tmp_path, 'echo \'error: cannot repair "x.whl" to "manylinux_2_28_x86_64" ABI because of the presence of '
        'too-recent versioned symbols.\' >&2; exit 2\n',
    )
    with pytest.raises(BuildError, match="does not accept") as exc:
        wheel_tag.auditwheel_repair(refuses, raw, "manylinux_2_28_x86_64", tmp_path / "out", env, (), tmp_path / "log")
    assert "too-recent versioned symbols" in exc.value.why and "repro:" in exc.value.fix
    with pytest.raises(EnvironmentError_, match="auditwheel is not available"):
        wheel_tag.auditwheel_repair(None, raw, "manylinux_2_28_x86_64", tmp_path / "out", env, (), tmp_path / "log")
