"""Checks an installed LLVM: find_package(LLVM CONFIG) works, the program prints the LLVM version,
and where the variant has NVPTX, a small .ll kernel lowers to PTX through the target machine.

A cross build's program runs under the emulator hermetic names (conf `user.hermetic:emulator`, e.g.
`qemu-aarch64-static -L /usr/aarch64-linux-gnu`); without one Conan's rule stands: it is not run.
How it ran goes to HERMETIC_TEST_OUTPUT/run.json, so hermetic can tell a skipped test from a passed one."""

import json
import os
import shlex
import shutil
from io import StringIO
from pathlib import Path

from conan import ConanFile
from conan.errors import ConanException
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class LLVMTestPackage(ConanFile):
    settings = "os", "arch", "compiler", "build_type"

    def requirements(self) -> None:
        self.requires(self.tested_reference_str)

    def layout(self) -> None:
        cmake_layout(self)

    def generate(self) -> None:
        tc = CMakeToolchain(self)
        # the release under test: CMakeLists.txt refuses any other LLVM that find_package might find
        tc.cache_variables["EXPECTED_LLVM_VERSION"] = str(self.dependencies[self.tested_reference_str].ref.version)
        tc.generate()

    def build(self) -> None:
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self) -> None:
        emulator = [] if can_run(self) else shlex.split(self.conf.get("user.hermetic:emulator", default="", check_type=str))
        if not can_run(self) and not emulator:
            return
        exe = os.path.join(self.cpp.build.bindirs[0], "llvm_test_package")
        llvm = self.dependencies[self.tested_reference_str]
        nvptx = "NVPTX" in str(llvm.options.targets).split(";")
        ptx = Path(self.build_folder) / "kernel.ptx"
        args = [exe, str(Path(self.source_folder) / "kernel.ll"), "sm_80", str(ptx)] if nvptx else [exe]
        printed = StringIO()
        self.run(shlex.join([*emulator, *args]), env="conanrun", stdout=printed)
        text = printed.getvalue()
        self.output.info(f"test program printed: {text.strip()}")
        want = f"LLVM {llvm.ref.version}"
        if text.splitlines()[:1] != [want]:
            raise ConanException(f"the test program printed {text[:500]!r}; its first line should be {want!r}")
        if nvptx:
            code = ptx.read_text()
            if ".visible .entry vadd" not in code or ".target sm_80" not in code:
                raise ConanException(f"lowered PTX lacks the kernel entry or target:\n{code[:2000]}")
        out = os.environ.get("HERMETIC_TEST_OUTPUT")
        if out:
            if nvptx:
                shutil.copyfile(ptx, Path(out) / "kernel.sm_80.ptx")
            (Path(out) / "run.json").write_text(json.dumps({"emulator": emulator, "output": text}) + "\n")
