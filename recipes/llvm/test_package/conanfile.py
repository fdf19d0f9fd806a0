"""Checks an installed LLVM: find_package(LLVM CONFIG) works, and where the
variant has NVPTX, a small .ll kernel lowers to PTX through the target machine."""

import os
import shutil
from pathlib import Path

from conan import ConanFile
from conan.errors import ConanException
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class LLVMTestPackage(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeToolchain"

    def requirements(self) -> None:
        self.requires(self.tested_reference_str)

    def layout(self) -> None:
        cmake_layout(self)

    def build(self) -> None:
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self) -> None:
        if not can_run(self):
            return
        exe = os.path.join(self.cpp.build.bindirs[0], "llvm_test_package")
        targets = str(self.dependencies[self.tested_reference_str].options.targets).split(";")
        if "NVPTX" not in targets:
            self.run(exe, env="conanrun")
            return
        ptx = Path(self.build_folder) / "kernel.ptx"
        kernel = Path(self.source_folder) / "kernel.ll"
        self.run(f"{exe} {kernel} sm_80 {ptx}", env="conanrun")
        text = ptx.read_text()
        if ".visible .entry vadd" not in text or ".target sm_80" not in text:
            raise ConanException(f"lowered PTX lacks the kernel entry or target:\n{text[:2000]}")
        out = os.environ.get("HERMETIC_TEST_OUTPUT")
        if out:
            shutil.copyfile(ptx, Path(out) / "kernel.sm_80.ptx")
