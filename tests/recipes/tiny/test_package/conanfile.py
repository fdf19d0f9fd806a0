"""Checks an installed tiny: find_package(Tiny CONFIG) works and the program prints the version and the checksum
of every part. A cross build's program runs under the emulator hermetic names (conf `user.hermetic:emulator`);
how it ran goes to HERMETIC_TEST_OUTPUT/run.json, as recipes/llvm's test_package does."""

import json
import os
import shlex
from io import StringIO
from pathlib import Path

from conan import ConanFile
from conan.errors import ConanException
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class TinyTestPackage(ConanFile):
    settings = "os", "arch", "compiler", "build_type"

    def requirements(self) -> None:
        self.requires(self.tested_reference_str)

    def layout(self) -> None:
        cmake_layout(self)

    def generate(self) -> None:
        tc = CMakeToolchain(self)
        tc.cache_variables["EXPECTED_TINY_VERSION"] = str(self.dependencies[self.tested_reference_str].ref.version)
        tc.generate()

    def build(self) -> None:
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self) -> None:
        emulator = [] if can_run(self) else shlex.split(self.conf.get("user.hermetic:emulator", default="", check_type=str))
        if not can_run(self) and not emulator:
            return
        exe = os.path.join(self.cpp.build.bindirs[0], "tiny_test_package")
        printed = StringIO()
        self.run(shlex.join([*emulator, exe]), env="conanrun", stdout=printed)
        text = printed.getvalue()
        self.output.info(f"test program printed: {text.strip()}")
        want = f"Tiny {self.dependencies[self.tested_reference_str].ref.version}"
        if text.splitlines()[:1] != [want]:
            raise ConanException(f"the test program printed {text[:500]!r}; its first line should be {want!r}")
        out = os.environ.get("HERMETIC_TEST_OUTPUT")
        if out:
            (Path(out) / "run.json").write_text(json.dumps({"emulator": emulator, "output": text}) + "\n")
