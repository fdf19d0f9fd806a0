"""A test project of llvmlite's shape for `hermetic wheel --recipe`: a setuptools sdist (no pyproject.toml)
whose build runs CMake itself, taking options from CMAKE_ARGS, for a shared library linking a static LLVM
that Python loads with ctypes, plus a stub C extension that makes the wheel platform-specific."""

import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_ext):
    def run(self):
        ffi = os.path.join(HERE, "ffi")
        build = os.path.join(ffi, "build")
        os.makedirs(build, exist_ok=True)
        # as llvmlite's ffi/build.py: "Unix Makefiles", options from CMAKE_ARGS split on spaces
        args = [a for a in os.environ.get("CMAKE_ARGS", "").split(" ") if a]
        subprocess.check_call(["cmake", "-G", "Unix Makefiles", ffi, *args], cwd=build)
        subprocess.check_call(["cmake", "--build", build, "--parallel"])
        super().run()
        # into the wheel's tree: build_py ran before this command
        shutil.copy(os.path.join(build, "libctypesprobe.so"), os.path.join(self.build_lib, "ctypesprobe"))


setup(
    name="ctypesprobe",
    version="0.2.0",
    description="hermetic's test project of llvmlite's shape",
    license_expression="Apache-2.0",
    packages=["ctypesprobe"],
    ext_modules=[Extension("ctypesprobe._stub", sources=["ctypesprobe/_stub.c"])],
    cmdclass={"build_ext": BuildWithCMake},
)
