"""Conan 2 recipe of `tiny`, the tests' stand-in for LLVM: the same options, layout and lifecycle, built in seconds.

hermetic drives it exactly as it drives recipes/llvm (verified archive handed over, CMake with the
reproducibility include, install of the listed components under DESTDIR, a test_package), so the
integration tier runs the whole pipeline on a real build without waiting for LLVM.
"""

import os
import re
import shlex
from pathlib import Path

import yaml
from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import check_sha256, unzip

_HERE = Path(__file__).resolve().parent
_VARIANTS = yaml.safe_load((_HERE / "variants.yml").read_text())
_DEFAULT = {
    k: ";".join(x.strip() for x in str(v).split(";") if x.strip())
    for k, v in _VARIANTS["variants"][_VARIANTS["default"]]["options"].items()
}


def _split(value: object) -> list[str]:
    return [v.strip() for v in str(value).split(";") if v.strip()]


class TinyConan(ConanFile):
    name = "tiny"
    license = "Apache-2.0"
    url = "https://example.invalid/tiny"
    description = "A tiny LLVM-shaped library for hermetic's tests"
    package_type = "static-library"
    settings = "os", "arch", "compiler", "build_type"
    exports = "variants.yml"
    options = {"variant": ["ANY"], "targets": ["ANY"], "projects": ["ANY"], "components": ["ANY"], "tools": ["ANY"]}  # noqa: RUF012 (Conan reads class attributes)
    default_options = {"variant": _VARIANTS["default"], **_DEFAULT}  # noqa: RUF012

    @property
    def _prefix(self) -> str:
        return str(self.conan_data["install_prefix"]).format(name=self.name, variant=self.options.variant, version=self.version)

    def validate(self) -> None:
        allowed = self.conan_data["option_values"]
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", str(self.options.variant)):
            raise ConanInvalidConfiguration(f"variant name {self.options.variant!r} is not a valid path component")
        for opt in ("targets", "projects", "components", "tools"):
            bad = [v for v in _split(self.options.get_safe(opt)) if v not in allowed[opt]]
            if bad:
                raise ConanInvalidConfiguration(f"option {opt}: unknown value(s) {', '.join(bad)}; valid: {', '.join(allowed[opt])}")

    def layout(self) -> None:
        cmake_layout(self, src_folder="src")

    def source(self) -> None:
        # hermetic hands over an archive it has verified; checked again so the recipe never trusts a path
        archive = self.conf.get("user.hermetic:source_archive")
        expected = self.conf.get("user.hermetic:source_sha256")
        if not archive or not expected:
            raise ConanException("tiny is built by hermetic: user.hermetic:source_archive and source_sha256 are required")
        check_sha256(self, archive, expected)
        unzip(self, archive, destination=self.source_folder, strip_root=True)

    def generate(self) -> None:
        tc = CMakeToolchain(self, generator="Ninja")
        maps = [f"-ffile-prefix-map={self.source_folder}=/usr/src/tiny", f"-ffile-prefix-map={self.build_folder}=/usr/src/tiny-build"]
        tc.extra_cflags += maps
        tc.extra_cxxflags += maps
        tc.cache_variables.update({
            "CMAKE_INSTALL_PREFIX": self._prefix,
            "TINY_TARGETS_TO_BUILD": str(self.options.targets),
            "TINY_DISTRIBUTION_COMPONENTS": str(self.options.components),
        })
        tc.generate()

    def build(self) -> None:
        cmake = CMake(self)
        cmake.configure(build_script_folder="tiny")
        out = Path(self.build_folder)
        self.run(f"ninja -C {shlex.quote(str(out))} -t commands distribution > hermetic-commands.txt", cwd=str(out))
        cmake.build(target="distribution")

    def package(self) -> None:
        dest = shlex.quote(self.package_folder)
        self.run(f"DESTDIR={dest} cmake --build {shlex.quote(self.build_folder)} --target install-distribution", cwd=self.build_folder)

    def package_info(self) -> None:
        self.cpp_info.set_property("cmake_find_mode", "none")
        prefix = self._prefix.lstrip("/")
        self.cpp_info.builddirs = [os.path.join(prefix, "lib", "cmake", "tiny")]
        self.cpp_info.includedirs = [os.path.join(prefix, "include")]
        self.cpp_info.libdirs = [os.path.join(prefix, "lib")]
