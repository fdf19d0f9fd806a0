"""The `support` variant built from the real 19.1.7 source with the host compiler, offline: what it records and
installs. The build is `hermetic verify`'s rebuild of a committed record (conftest.py's `host_verify`), from the
whole release archive; test_verify_llvm.py checks the comparison itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT, hermetic

PREFIX = "usr/lib64/llvm-support-19.1.7"


@pytest.fixture(scope="module")
def first(support_install: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(support_install.read_text())


def test_record_says_what_was_built_and_how(first: dict) -> None:  # type: ignore[type-arg]
    assert first["schema"] == "hermetic.build-record/1"
    assert first["recipe"]["name"] == "llvm" and first["recipe"]["version"] == "19.1.7"
    assert first["variant"] == "support"
    assert first["options"]["components"] == "LLVMDemangle;LLVMSupport;llvm-headers;cmake-exports"
    assert first["sources"][0]["sha256"] in (
        "82401fea7b79d0078043f7598b835284d6650a75b93e64b6f761ea7b63097501",
        "ae498f3bc58ae2d9f64ef5f0c035c4240152bf015a5b7738b15c22e93bdc97ce",
    )
    # built from the whole release archive (--from-release): the pruned subset is verify's comparison
    assert first["pruned"] is None and first["source_archive"]["sha256"] == first["sources"][0]["sha256"]
    assert first["offline"]["enforced"] is True, first["offline"]
    assert first["build_commands"] and first["build_commands"] > 50
    for tool in ("cc", "cxx", "cmake", "ninja", "conan"):
        assert first["toolchain"][tool] not in ("", "not found", "unknown"), tool
    assert first["source_date_epoch"] == 1736812800
    files = {f["path"]: f for f in first["tree"]["files"]}
    assert f"{PREFIX}/lib/libLLVMSupport.a" in files
    assert len(files[f"{PREFIX}/lib/libLLVMSupport.a"]["sha256"]) == 64


def test_slim_tree_holds_only_the_variant(first: dict) -> None:  # type: ignore[type-arg]
    paths = [f["path"] for f in first["tree"]["files"]]
    libs = sorted(p.rsplit("/", 1)[1] for p in paths if p.startswith(f"{PREFIX}/lib/lib"))
    assert libs == ["libLLVMDemangle.a", "libLLVMSupport.a"]
    assert not any(p.startswith(f"{PREFIX}/bin") for p in paths), "no tools in a slim tree"
    assert not any("/share/doc" in p or "/docs/" in p for p in paths)
    assert all(p.startswith("usr") for p in paths)
    exports = Path(first["install_root"], PREFIX, "lib/cmake/llvm/LLVMExports.cmake").read_text()
    assert "LLVMSupport" in exports and "LLVMCore" not in exports


def test_up_to_date_build_is_skipped(first: dict, source_cache: Path) -> None:  # type: ignore[type-arg]
    work = Path(first["install_root"]).parents[2]
    proc = hermetic("build", "llvm", "--variant", "support", "--source", "full", "--work-dir", str(work),
                    "--cache", str(source_cache), "--toolchain", "host")
    assert "up to date" in proc.stderr
    assert json.loads(proc.stdout)["tree_digest"] == first["tree"]["digest"]


def _cmake_project(tmp_path: Path, llvm_dir: Path) -> str:
    build = tmp_path / "consumer"
    src = ROOT / "recipes" / "llvm" / "test_package"
    subprocess.run(
        ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", f"-DLLVM_DIR={llvm_dir}", "-DCMAKE_BUILD_TYPE=Release",
         "-DEXPECTED_LLVM_VERSION=19.1.7"],
        check=True, capture_output=True, text=True,
    )
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True, text=True)
    return subprocess.run([str(build / "llvm_test_package")], check=True, capture_output=True, text=True).stdout


def test_find_package_against_the_installed_tree(first: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    llvm_dir = Path(first["install_root"], PREFIX, "lib/cmake/llvm")
    assert _cmake_project(tmp_path, llvm_dir).strip() == "LLVM 19.1.7"


def test_installed_tree_is_relocatable(first: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    moved = tmp_path / "opt" / "llvm"
    shutil.copytree(Path(first["install_root"], PREFIX), moved, symlinks=True)
    assert _cmake_project(tmp_path, moved / "lib/cmake/llvm").strip() == "LLVM 19.1.7"


# The host toolchain's digest holds only on the distribution that made it: tests/golden/digests.json names the
# one built on Debian 12 with its gcc, the compiler CI has. Another compiler release gives another tree, which is
# exactly why the pinned toolchain exists.
DEBIAN_12_GCC = "cc (Debian 12.2.0-14+deb12u1) 12.2.0"


def test_host_build_on_debian_12_gives_the_committed_digest(first: dict, golden: dict) -> None:  # type: ignore[type-arg]
    committed = golden["llvm-support-host-debian12"]
    if first["toolchain"]["cc"] != DEBIAN_12_GCC:
        pytest.skip(f"built with {first['toolchain']['cc']!r}, not Debian 12's gcc: the committed digest does not apply")
    assert first["tree"]["digest"] == committed["tree"]


def test_a_build_with_another_conan_is_refused_before_it_runs(tmp_path: Path, source_cache: Path) -> None:
    """Conan's version is read from what this Python imports: another one first on PYTHONPATH
    (here only its metadata, which is what pip leaves) makes the build stop with exit 9."""
    fake = tmp_path / "site" / "conan-2.0.1.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: conan\nVersion: 2.0.1\n")
    work = tmp_path / "work"
    proc = hermetic(
        "build", "llvm", "--variant", "support", "--work-dir", str(work), "--cache", str(source_cache),
        "--toolchain", "host", "--quiet", env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT / 'src'}"},
        check=False,
    )
    assert proc.returncode == 9, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "the build would run Conan 2.0.1" in proc.stderr and "pip install conan==" in proc.stderr
    assert not (work / "llvm" / "support" / "record.json").exists()
