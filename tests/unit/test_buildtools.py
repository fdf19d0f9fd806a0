"""The pinned CMake and Ninja: unpacked from the verified wheelhouse, and the only ones a build runs."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import ROOT
from hermetic.build import buildenv
from hermetic.build import buildenv as buildtools
from hermetic.core.errors import EnvironmentError_, SourceError
from hermetic.model.settings import Settings

pytestmark = pytest.mark.unit


def _wheel(d: Path, name: str, version: str, entries: dict[str, str]) -> Path:
    path = d / f"{name}-{version}-py3-none-manylinux_2_17_{platform.machine()}.whl"
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in entries.items():
            info = zipfile.ZipInfo(arc)
            info.external_attr = (0o100755 if "/bin/" in arc or "/scripts/" in arc else 0o100644) << 16
            z.writestr(info, text)
    return path


def _house(tmp_path: Path, cmake_says: str = "4.4.4") -> Settings:
    """A wheelhouse and toolchain dir with fake cmake and ninja wheels laid out like the real ones."""
    house = tmp_path / "house"
    house.mkdir()
    cmake = _wheel(house, "cmake", "4.4.4", {
        "cmake/__init__.py": "",
        "cmake/data/bin/cmake": f"#!/bin/sh\necho 'cmake version {cmake_says}'\n",
        "cmake/data/share/cmake-4.4/Modules/X.cmake": "# a module\n",
        "cmake/data/doc/cmake-4.4/LICENSE.rst": "not needed to build\n",
    })
    ninja = _wheel(house, "ninja", "1.13.2", {
        "ninja/__init__.py": "",
        "ninja-1.13.2.data/scripts/ninja": "#!/bin/sh\necho 1.13.2.git.kitware.jobserver-pipe-1\n",
    })
    tc = tmp_path / "root" / "toolchain"
    tc.mkdir(parents=True)
    lines = [f"{w.name.split('-')[0]}=={w.name.split('-')[1]} --hash=sha256:{hashlib.sha256(w.read_bytes()).hexdigest()}"
             for w in (cmake, ninja)]
    (tc / "build-requirements.txt").write_text("\n".join(lines) + "\n")
    return Settings(root=tmp_path / "root", cache_dir=tmp_path / "cache", work_dir=tmp_path / "w", wheelhouse=house)


def test_tools_are_unpacked_once_and_checked(tmp_path: Path) -> None:
    settings = _house(tmp_path)
    logged: list[str] = []
    tools = buildenv.ensure(settings, logged.append)
    cmake, ninja = tools.exe("cmake"), tools.exe("ninja")
    assert cmake.is_file() and os.access(cmake, os.X_OK) and ninja.is_file()
    assert (cmake.parent.parent / "share" / "cmake-4.4" / "Modules" / "X.cmake").is_file()  # its modules beside it
    assert not (cmake.parent.parent / "doc").exists()
    env = {"PATH": tools.path("/usr/bin:/bin")}
    assert buildenv.check_versions(tools, env) == {
        "cmake": "cmake version 4.4.4", "ninja": "1.13.2.git.kitware.jobserver-pipe-1"}
    assert len(logged) == 2
    buildenv.ensure(settings, logged.append)
    assert len(logged) == 2, "a second use unpacks nothing"
    assert set(tools.identity()) == {"cmake", "ninja"}


def test_another_cmake_first_on_path_is_refused(tmp_path: Path) -> None:
    settings = _house(tmp_path)
    tools = buildenv.ensure(settings)
    other = tmp_path / "other-bin"
    other.mkdir()
    (other / "cmake").write_text("#!/bin/sh\necho 'cmake version 4.4.4'\n")  # even one saying the same version
    (other / "cmake").chmod(0o755)
    with pytest.raises(EnvironmentError_, match=r"not the pinned cmake 4\.4\.4"):
        buildenv.check_versions(tools, {"PATH": f"{other}:{tools.path('/usr/bin')}"})


def test_a_tool_saying_another_version_is_refused(tmp_path: Path) -> None:
    settings = _house(tmp_path, cmake_says="3.25.1")
    tools = buildenv.ensure(settings)
    with pytest.raises(EnvironmentError_, match=r"cmake version 3\.25\.1"):
        buildenv.check_versions(tools, {"PATH": tools.path("/usr/bin")})


def test_a_changed_tool_in_the_cache_is_unpacked_again(tmp_path: Path) -> None:
    settings = _house(tmp_path)
    cmake = buildenv.ensure(settings).exe("cmake")
    cmake.write_text("#!/bin/sh\necho 'cmake version 4.4.4'; echo tampered\n")
    assert "tampered" not in buildenv.ensure(settings).exe("cmake").read_text()


def test_a_wheelhouse_without_the_tools_says_how_to_fill_it(tmp_path: Path) -> None:
    settings = _house(tmp_path)
    for w in settings.wheelhouse.glob("ninja-*.whl"):  # type: ignore[union-attr]
        w.unlink()
    with pytest.raises(SourceError) as err:
        buildenv.ensure(settings)
    assert "hermetic fetch" in err.value.fix and "ninja==1.13.2" in err.value.why


def test_the_real_pins_name_both_tools() -> None:
    reqs = (ROOT / "toolchain" / "build-requirements.txt").read_text()
    assert all(f"\n{name}==" in "\n" + reqs for name in buildenv.TOOLS)


def test_conan_pin_is_pyprojects_and_the_installed_conan_passes() -> None:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = [d.partition("==")[2] for d in deps if d.startswith("conan==")]
    assert pinned and buildenv.conan_pin() == pinned[0]
    # this environment was installed from the pins (.ci/setup): the build's Conan is this Python's
    cmd = buildenv.conan_command()
    assert cmd[0] == sys.executable and "from conans.conan import run" in cmd[-1]
    out = subprocess.run([*cmd, "--version"], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True)
    assert out.stdout.strip() == f"Conan version {buildenv.conan_pin()}", out


def test_another_conan_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = buildtools.importlib.metadata.version
    monkeypatch.setattr(buildtools.importlib.metadata, "version",
                        lambda name: "2.0.1" if name == "conan" else real(name))
    with pytest.raises(EnvironmentError_) as err:
        buildenv.conan_command()
    msg = str(err.value)
    assert "Conan 2.0.1" in msg and f"pinned Conan {buildenv.conan_pin()}" in msg
    assert err.value.fix == f"pip install conan=={buildenv.conan_pin()}" and "toolchain files" in err.value.why
