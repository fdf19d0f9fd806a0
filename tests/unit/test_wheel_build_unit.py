"""Unit tests of the wheel builder: requirements, wheelhouse, re-packing, tags, LLVM prefix checks, errors."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from hermetic.__main__ import main as cli_main
from hermetic.build import llvm_prefix, wheel, wheelfile
from hermetic.cli import common as cli_common
from hermetic.cli import wheel as cli_wheel
from hermetic.core.errors import BuildError, ExitCode, RecipeError, SourceError, UsageError
from hermetic.fetch import wheelhouse
from hermetic.model import requirements, wheels
from hermetic.model.settings import Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
H1 = "a" * 64
H2 = "b" * 64


def settings(tmp_path: Path) -> Settings:
    return Settings(root=ROOT, cache_dir=tmp_path / "cache", work_dir=tmp_path / "work", quiet=True)


# --- requirements ------------------------------------------------------------------------------


def test_parse_requirements_with_continuations_and_comments() -> None:
    text = f"""# comment
Scikit_Build.Core==1.1.2 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}

nanobind==3.1.0 --hash=sha256:{H1}  # trailing comment
"""
    reqs = requirements.parse_requirements(text, "r.txt")
    assert [(r.name, r.version) for r in reqs] == [("nanobind", "3.1.0"), ("scikit-build-core", "1.1.2")]
    assert reqs[1].hashes == (H1, H2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"cmake>=3.20 --hash=sha256:{H1}\n", "not pinned"),
        (f"cmake==4.4.4; python_version<'3.12' --hash=sha256:{H1}\n", "not pinned"),
        ("cmake==4.4.4\n", "has no --hash"),
        ("cmake==4.4.4 --hash=sha256:abc\n", "unexpected"),
        (f"cmake==4.4.4 --hash=md5:{H1}\n", "unexpected"),
        (f"--index-url https://example.org\ncmake==4.4.4 --hash=sha256:{H1}\n", "not allowed"),
        (f"cmake==4.4.4 --hash=sha256:{H1}\nCMake==4.4.4 --hash=sha256:{H2}\n", "listed twice"),
        ("# only comments\n", "lists no requirements"),
        (f"cmake==4.4.4 --hash=sha256:{H1} \\\n", "past the end"),
    ],
)
def test_parse_requirements_refuses(text: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message) as exc:
        requirements.parse_requirements(text, "r.txt")
    assert exc.value.fix and "r.txt:" in exc.value.what + " r.txt:"


def test_real_build_requirements_are_complete_and_pinned() -> None:
    reqs = requirements.load_requirements(ROOT / "toolchain" / "build-requirements.txt")
    names = {r.name for r in reqs.items}
    # the compiler core's build-system.requires, the tools it runs, their deps, and pip for the bootstrap
    assert {"scikit-build-core", "nanobind", "cmake", "ninja", "packaging", "pathspec", "pip"} <= names
    assert {"auditwheel", "pyelftools"} <= names
    assert all(r.hashes for r in reqs.items)
    assert len(reqs.digest()) == 64


def test_requirements_digest_ignores_layout() -> None:
    a = requirements.parse_requirements(f"x==1 --hash=sha256:{H1}\ny==2 --hash=sha256:{H2}\n")
    b = requirements.parse_requirements(f"# c\ny==2 \\\n  --hash=sha256:{H2}\nx==1 --hash=sha256:{H1}\n")
    c = requirements.parse_requirements(f"x==1 --hash=sha256:{H2}\ny==2 --hash=sha256:{H2}\n")
    assert requirements.Requirements(Path("a"), a).digest() == requirements.Requirements(Path("b"), b).digest()
    assert requirements.Requirements(Path("a"), a).digest() != requirements.Requirements(Path("c"), c).digest()


# --- wheelhouse --------------------------------------------------------------------------------


def _house(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """A requirements file pinning two fake wheels, and their contents."""
    files = {"alpha-1.0-py3-none-any.whl": b"alpha wheel", "beta_pkg-2.0-py3-none-any.whl": b"beta wheel"}
    lines = [
        f"alpha==1.0 --hash=sha256:{hashlib.sha256(files['alpha-1.0-py3-none-any.whl']).hexdigest()}",
        f"beta-pkg==2.0 --hash=sha256:{hashlib.sha256(files['beta_pkg-2.0-py3-none-any.whl']).hexdigest()}",
    ]
    req = tmp_path / "reqs.txt"
    req.write_text("\n".join(lines) + "\n")
    house = tmp_path / "house"
    house.mkdir()
    return req, house, files


def test_check_wheelhouse_finds_verified_and_flags_tampered(tmp_path: Path) -> None:
    req, house, files = _house(tmp_path)
    reqs = requirements.load_requirements(req)
    (house / "alpha-1.0-py3-none-any.whl").write_bytes(files["alpha-1.0-py3-none-any.whl"])
    (house / "beta_pkg-2.0-py3-none-any.whl").write_bytes(b"tampered")
    (house / "unrelated-9-py3-none-any.whl").write_bytes(b"x")
    check = requirements.check_wheelhouse(house, reqs)
    assert [p.name for p in check.found["alpha"]] == ["alpha-1.0-py3-none-any.whl"]
    assert check.missing == ("beta-pkg==2.0",)
    assert check.bad == ("beta_pkg-2.0-py3-none-any.whl",)
    with pytest.raises(SourceError) as exc:
        requirements.require_wheelhouse(house, reqs)
    assert "beta-pkg==2.0" in exc.value.why and "hermetic fetch" in exc.value.fix


def test_fetch_is_a_no_op_when_complete(tmp_path: Path) -> None:
    req, house, files = _house(tmp_path)
    for name, data in files.items():
        (house / name).write_bytes(data)
    # a python that cannot run proves nothing was downloaded
    out = wheelhouse.fetch_wheelhouse(settings(tmp_path), lambda m: None, req, house, python="/nonexistent/python")
    assert out == house


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_fetch_offline_and_missing_is_a_clear_error(tmp_path: Path) -> None:
    req, house, _ = _house(tmp_path)
    py = _fake_python(tmp_path, "print('ERROR: Could not find a version that satisfies the requirement alpha==1.0'); sys.exit(1)")
    with pytest.raises(SourceError) as exc:
        wheelhouse.fetch_wheelhouse(settings(tmp_path), lambda m: None, req, house, python=py)
    assert "Could not find a version" in exc.value.why
    assert "--wheelhouse" in exc.value.fix
    assert exc.value.exit_code == ExitCode.SOURCE
    assert not list(house.glob("*.whl"))


def test_fetch_never_caches_files_that_do_not_match(tmp_path: Path) -> None:
    req, house, files = _house(tmp_path)
    # a "pip" that writes the right names with the wrong bytes
    body = (
        "from pathlib import Path\n"
        "d = Path(sys.argv[sys.argv.index('-d') + 1])\n"
        f"for n in {sorted(files)!r}:\n    (d / n).write_bytes(b'evil')\n"
    )
    with pytest.raises(SourceError, match="do not match"):
        wheelhouse.fetch_wheelhouse(settings(tmp_path), lambda m: None, req, house, python=_fake_python(tmp_path, body))
    assert not list(house.rglob("*.whl"))


def test_fetch_moves_verified_downloads_in(tmp_path: Path) -> None:
    req, house, files = _house(tmp_path)
    body = (
        "from pathlib import Path\n"
        "assert '--require-hashes' in sys.argv and '--only-binary=:all:' in sys.argv and '--no-deps' in sys.argv\n"
        "d = Path(sys.argv[sys.argv.index('-d') + 1])\n"
        f"for n, data in {files!r}.items():\n    (d / n).write_bytes(data)\n"
    )
    out = wheelhouse.fetch_wheelhouse(settings(tmp_path), lambda m: None, req, house, python=_fake_python(tmp_path, body))
    assert sorted(p.name for p in out.glob("*.whl")) == sorted(files)
    assert json.loads((out / "wheelhouse.json").read_text())["files"]["alpha"] == ["alpha-1.0-py3-none-any.whl"]
    assert not [p for p in out.iterdir() if p.name.startswith(".download-")]


def test_download_argv_targets_each_python() -> None:
    argv = wheelhouse.download_argv("py", Path("r.txt"), Path("d"), "3.12", "x86_64")
    assert argv[argv.index("--python-version") + 1] == "3.12"
    assert "--only-binary=:all:" in argv and "--require-hashes" in argv and "--no-deps" in argv
    assert "manylinux2014_x86_64" in argv


# --- re-packing ---------------------------------------------------------------------------------


def _raw_wheel(path: Path, order: list[str], mtime: tuple[int, int, int, int, int, int], umask_modes: bool) -> Path:
    contents = {
        "pkg/__init__.py": b"x = 1\n",
        "pkg/_core.cpython-311-x86_64-linux-gnu.so": b"\x7fELF fake",
        "pkg/data/table.txt": b"1,2\n",
        "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
        "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n",
        "pkg-1.0.dist-info/RECORD": b"stale,,\n",
    }
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(zipfile.ZipInfo("pkg/", mtime), b"")
        for name in order:
            info = zipfile.ZipInfo(name, mtime)
            mode = 0o700 if name.endswith(".so") else (0o600 if umask_modes else 0o664)
            info.external_attr = (stat.S_IFREG | mode) << 16
            z.writestr(info, contents[name])
    return path


NAMES = [
    "pkg-1.0.dist-info/WHEEL",
    "pkg/_core.cpython-311-x86_64-linux-gnu.so",
    "pkg-1.0.dist-info/RECORD",
    "pkg/__init__.py",
    "pkg-1.0.dist-info/METADATA",
    "pkg/data/table.txt",
]


def test_repack_is_deterministic_whatever_the_input_order_times_and_modes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _raw_wheel(tmp_path / "a" / "pkg-1.0-cp311-cp311-linux_x86_64.whl", NAMES, (2024, 5, 6, 7, 8, 10), True)
    b = _raw_wheel(tmp_path / "b" / "pkg-1.0-cp311-cp311-linux_x86_64.whl", list(reversed(NAMES)), (2030, 1, 1, 0, 0, 0), False)
    out_a = wheelfile.repack(a, tmp_path / "out-a", 1736812800)
    out_b = wheelfile.repack(b, tmp_path / "out-b", 1736812800)
    assert out_a.read_bytes() == out_b.read_bytes()
    assert out_a.name == "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    assert wheelfile.repack(a, tmp_path / "out-c", 1736812800 + 86400).read_bytes() != out_a.read_bytes()


def test_repack_layout_record_modes_and_times(tmp_path: Path) -> None:
    raw = _raw_wheel(tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl", NAMES, (2024, 5, 6, 7, 8, 10), True)
    out = wheelfile.repack(raw, tmp_path / "out", 1736812800)
    with zipfile.ZipFile(out) as z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        assert names == [
            "pkg/__init__.py",
            "pkg/_core.cpython-311-x86_64-linux-gnu.so",
            "pkg/data/table.txt",
            "pkg-1.0.dist-info/METADATA",
            "pkg-1.0.dist-info/WHEEL",
            "pkg-1.0.dist-info/RECORD",
        ]
        for i in infos:
            assert i.date_time == (2025, 1, 14, 0, 0, 0)
            assert i.compress_type == zipfile.ZIP_DEFLATED
            assert i.create_system == 3
            mode = stat.S_IMODE(i.external_attr >> 16)
            assert mode == (0o755 if i.filename.endswith(".so") else 0o644), i.filename
        rows = z.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
        assert rows[-1] == "pkg-1.0.dist-info/RECORD,,"
        data = z.read("pkg/__init__.py")
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert f"pkg/__init__.py,sha256={digest},{len(data)}" in rows
        assert "stale,," not in rows
    assert wheelfile.verify_record(out) == []
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_repack_retags_name_and_wheel_file(tmp_path: Path) -> None:
    raw = _raw_wheel(tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl", NAMES, (2024, 5, 6, 7, 8, 10), True)
    out = wheelfile.repack(raw, tmp_path / "out", 1736812800, "manylinux_2_28_x86_64")
    assert out.name == "pkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(out) as z:
        assert "Tag: cp311-cp311-manylinux_2_28_x86_64" in z.read("pkg-1.0.dist-info/WHEEL").decode().splitlines()
    assert wheelfile.verify_record(out) == []


def test_repack_clamps_pre_1980_epochs(tmp_path: Path) -> None:
    raw = _raw_wheel(tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl", NAMES, (2024, 5, 6, 7, 8, 10), True)
    out = wheelfile.repack(raw, tmp_path / "out", 0)
    with zipfile.ZipFile(out) as z:
        assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_repack_refuses_unsafe_entries(tmp_path: Path) -> None:
    raw = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(raw, "w") as z:
        z.writestr("../evil.py", b"")
        z.writestr("pkg-1.0.dist-info/WHEEL", b"Tag: py3-none-any\n")
    with pytest.raises(BuildError, match="unsafe entry"):
        wheelfile.repack(raw, tmp_path / "out", 1736812800)


def test_verify_record_detects_changes(tmp_path: Path) -> None:
    raw = _raw_wheel(tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl", NAMES, (2024, 5, 6, 7, 8, 10), True)
    out = wheelfile.repack(raw, tmp_path / "out", 1736812800)
    tampered = tmp_path / "t" / out.name
    tampered.parent.mkdir()
    with zipfile.ZipFile(out) as zin, zipfile.ZipFile(tampered, "w") as zout:
        for i in zin.infolist():
            data = b"x = 2\n" if i.filename == "pkg/__init__.py" else zin.read(i)
            zout.writestr(i, data)
        zout.writestr("pkg/extra.py", b"")
    problems = wheelfile.verify_record(tampered)
    assert "RECORD mismatch: pkg/__init__.py" in problems
    assert "not in RECORD: pkg/extra.py" in problems


def test_wheel_names() -> None:
    n = wheelfile.WheelName.parse("tilec-0.1.0-cp312-abi3-linux_x86_64.whl")
    assert (n.distribution, n.python, n.abi, n.platform, n.tag) == ("tilec", "cp312", "abi3", "linux_x86_64", "cp312-abi3-linux_x86_64")
    assert wheelfile.WheelName.parse("a-1-7-py3-none-any.whl").filename() == "a-1-7-py3-none-any.whl"
    with pytest.raises(BuildError):
        wheelfile.WheelName.parse("tilec-0.1.0.tar.gz")


# --- tags and glibc ----------------------------------------------------------------------------


READELF = """
Version symbols section '.gnu.version' contains 5 entries:
  000:   0 (*local*)       2 (GLIBC_2.99)
Version needs section '.gnu.version_r' contains 3 entries:
 Addr: 0x0000000000000000  Offset: 0x001000  Link: 4 (.dynstr)
  000000: Version: 1  File: libc.so.6  Cnt: 3
  0x0010:   Name: GLIBC_2.2.5  Flags: none  Version: 5
  0x0020:   Name: GLIBC_2.34  Flags: none  Version: 4
  0x0030:   Name: GLIBC_2.4  Flags: none  Version: 3
  0x0040:   Name: GLIBC_PRIVATE  Flags: none  Version: 2
  000050: Version: 1  File: libstdc++.so.6  Cnt: 2
  0x0060:   Name: GLIBCXX_3.4.29  Flags: none  Version: 7
  0x0070:   Name: CXXABI_1.3.13  Flags: none  Version: 6
"""


def test_max_symbol_versions_compares_numerically() -> None:
    needs = READELF.split("Version needs section", 1)[1]
    assert wheelfile.max_symbol_versions(needs) == {"GLIBC": "2.34", "GLIBCXX": "3.4.29", "CXXABI": "1.3.13"}


def test_symbol_versions_of_a_real_binary() -> None:
    found = wheelfile.symbol_versions(Path(sys.executable).resolve())
    assert "GLIBC" in found and wheelfile.version_key(found["GLIBC"]) >= (2, 2)


def test_parse_auditwheel_among_log_lines() -> None:
    report = {"version": 1, "overall_tag": "manylinux_2_28_x86_64", "sym_tag": "manylinux_2_28_x86_64", "external_libs": {}}
    out = "INFO:auditwheel.wheel_abi:setting libc to glibc\n" + json.dumps(report, indent=4) + "\n"
    parsed = wheelfile.parse_auditwheel(out)
    assert wheelfile.platform_from_audit(parsed, "linux_x86_64") == "manylinux_2_28_x86_64"
    assert wheelfile.platform_from_audit({"overall_tag": "linux_x86_64"}, "linux_x86_64") == "linux_x86_64"
    with pytest.raises(BuildError):
        wheelfile.parse_auditwheel("INFO: nothing\n{not json\n")


# --- the LLVM prefix ---------------------------------------------------------------------------


def _fake_llvm(root: Path, version: str, sub: str = "lib/cmake/llvm") -> Path:
    d = root / sub
    d.mkdir(parents=True)
    (d / "LLVMConfig.cmake").write_text(f"set(LLVM_PACKAGE_VERSION {version})\n")
    (d / "LLVMConfigVersion.cmake").write_text(f'set(PACKAGE_VERSION "{version}")\n')
    return root


def test_inspect_llvm_accepts_19(tmp_path: Path) -> None:
    found = llvm_prefix.inspect_llvm(_fake_llvm(tmp_path / "p", "19.1.7", "lib64/cmake/llvm"), 19)
    assert found.version == "19.1.7" and found.cmake_dir.name == "llvm" and found.major == 19


def test_inspect_llvm_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist") as e1:
        llvm_prefix.inspect_llvm(tmp_path / "nope", 19)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"no LLVMConfig\.cmake") as e2:
        llvm_prefix.inspect_llvm(tmp_path / "empty", 19)
    with pytest.raises(UsageError, match=r"LLVM 18\.1\.8, the compiler core needs LLVM 19") as e3:
        llvm_prefix.inspect_llvm(_fake_llvm(tmp_path / "old", "18.1.8"), 19)
    for e in (e1, e2, e3):
        assert e.value.why and e.value.fix and e.value.exit_code == ExitCode.USAGE


def test_find_llvm_record(tmp_path: Path) -> None:
    variant = tmp_path / "work" / "llvm" / "support"
    prefix = variant / "install" / "usr" / "lib64" / "llvm-support-19.1.7"
    _fake_llvm(prefix, "19.1.7")
    rec = {
        "schema": "hermetic.build-record/1",
        "recipe": {"name": "llvm", "version": "19.1.7", "digest": "ab" * 32},
        "variant": "support",
        "options": {},
        "inputs_digest": "abc",
        "sources": [],
        "source_archive": {"file": "llvm-project-19.1.7.src.tar.xz", "sha256": "cd" * 32},
        "pruned": None,
        "source_date_epoch": 1736812800,
        "offline": {"enforced": False, "method": "none", "reason": "test"},
        "jobs": 1,
        "wall_time_s": 1.0,
        "build_commands": None,
        "test_package": {"ran": True, "ptx": []},
        "install_root": str(variant / "install"),
        "prefix": "/usr/lib64/llvm-support-19.1.7",
        "tree": {"digest": "sha256:123", "size": 0, "files": []},
    }
    (variant / "record.json").write_text(json.dumps(rec))
    found = llvm_prefix.find_llvm_record(prefix, tmp_path / "elsewhere")
    assert found is not None and found.tree_digest == "sha256:123" and found.variant == "support"
    assert llvm_prefix.find_llvm_record(_fake_llvm(tmp_path / "other", "19.1.7"), tmp_path / "work") is None


# --- planning and the command line -------------------------------------------------------------


def test_real_wheel_recipe_loads() -> None:
    wr = wheels.load_wheel_recipe(ROOT / "recipes")
    assert wr.project == "src/compiler" and wr.requirements == "toolchain/build-requirements.txt"
    assert "build" in wr.exclude


def test_plan_refuses_missing_wheelhouse(tmp_path: Path) -> None:
    prefix = _fake_llvm(tmp_path / "llvm", "19.1.7")
    with pytest.raises(SourceError, match="does not hold the pinned build requirements") as exc:
        wheel.plan(settings(tmp_path), None, prefix, None, tmp_path / "empty-house")
    assert "missing: " in exc.value.why and "hermetic fetch" in exc.value.fix


def test_plan_refuses_a_non_project(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a Python project"):
        wheel.plan(settings(tmp_path), tmp_path, _fake_llvm(tmp_path / "llvm", "19.1.7"), None, None)


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = cli_main(argv)
    return rc, capsys.readouterr().err


def test_cli_reports_errors_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--root", str(ROOT), "--cache", str(tmp_path / "c"), "--work-dir", str(tmp_path / "w")]
    rc, err = _main(["wheel", "--llvm", str(tmp_path / "missing"), *base], capsys)
    assert rc == ExitCode.USAGE and "error: LLVM prefix" in err and "fix:" in err and "Traceback" not in err
    rc, err = _main(["wheel", "--llvm", str(_fake_llvm(tmp_path / "l", "17.0.6")), *base], capsys)
    assert rc == ExitCode.USAGE and "needs LLVM 19" in err
    rc, err = _main(["wheel", "--llvm", str(_fake_llvm(tmp_path / "m", "19.1.7")), *base], capsys)
    assert rc == ExitCode.SOURCE and "wheelhouse" in err and "hermetic fetch" in err


def test_register_uses_the_common_options() -> None:
    common = cli_common.common_parsers()
    parser = argparse.ArgumentParser()
    cli_wheel.register(parser.add_subparsers(), common)
    args = parser.parse_args(["wheel", "src/compiler", "--llvm", "/p", "--output", "o", "--wheelhouse", "h", "-j", "2", "--offline", "require"])
    assert (args.project, args.llvm, args.output, args.wheelhouse, args.jobs, args.offline) == ("src/compiler", "/p", "o", "h", 2, "require")
    assert args.func is cli_wheel.cmd_wheel


def test_module_reads_no_environment() -> None:
    # settings come in through Settings; only sandbox.build_env reads the host environment
    for mod in (wheel, wheelhouse):
        src = Path(str(mod.__file__)).read_text()
        assert "os.environ" not in src and "getenv" not in src


def test_venv_key_follows_requirements(tmp_path: Path) -> None:
    req, _, _ = _house(tmp_path)
    reqs = requirements.load_requirements(req)
    other = requirements.Requirements(req, reqs.items[:1])
    wr = wheels.load_wheel_recipe(ROOT / "recipes")
    llvm = llvm_prefix.LLVMPrefix(tmp_path, tmp_path, "19.1.7")
    a = wheel.WheelJob(tmp_path, llvm, tmp_path, tmp_path, reqs, wr, 0, tmp_path)
    b = wheel.WheelJob(tmp_path, llvm, tmp_path, tmp_path, other, wr, 0, tmp_path)
    assert a.venv_key(sys.executable) == a.venv_key(sys.executable) != b.venv_key(sys.executable)
    assert os.sep not in a.venv_key(sys.executable)
