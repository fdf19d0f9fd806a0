"""Conan 2 recipe of a slim LLVM: only the named targets, libraries and tools.

Variants (variants.yml) are named option sets; the option values accepted are
listed in conandata.yml so that this recipe and `hermetic` validate alike.
The install prefix (conandata.yml's install_prefix: /usr/lib64/llvm-<variant>-<version>) is staged under the
package folder with DESTDIR so that the tree can be copied anywhere as is.
"""

import os
import re
import shlex
from pathlib import Path

import yaml
from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.build import cross_building
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import check_sha256, get, unzip

_HERE = Path(__file__).resolve().parent
_VARIANTS = yaml.safe_load((_HERE / "variants.yml").read_text())
_DEFAULT = {
    k: ";".join(x.strip() for x in str(v).split(";") if x.strip())
    for k, v in _VARIANTS["variants"][_VARIANTS["default"]]["options"].items()
}
_LIBRARY = re.compile(r"^(LLVM|MLIR)[A-Za-z0-9]+$")
# Cache variables a cross build's nested native configure (tablegen for the build machine) does not
# take from the outer one: LLVM passes it targets and projects itself, and it installs nothing.
# Everything else (the switches against the machine's libraries, the pruned directories left out)
# it must get, or it finds zlib on the machine or misses the pruned docs/ and examples/.
_NOT_NATIVE = ("CMAKE_INSTALL_PREFIX", "LLVM_TARGETS_TO_BUILD", "LLVM_ENABLE_PROJECTS", "LLVM_DISTRIBUTION_COMPONENTS")


def _split(value: object) -> list[str]:
    return [v.strip() for v in str(value).split(";") if v.strip()]


class LLVMConan(ConanFile):
    name = "llvm"
    # No `version` here: the versions are the keys of conandata.yml and hermetic passes the one
    # it builds (`conan create --version`), so a second release is data, not code.
    license = "Apache-2.0 WITH LLVM-exception"
    url = "https://github.com/llvm/llvm-project"
    description = "Slim, source-built LLVM for GPU compiler stacks"
    package_type = "static-library"
    settings = "os", "arch", "compiler", "build_type"
    exports = "variants.yml"
    options = {
        "variant": ["ANY"],
        "targets": ["ANY"],
        "projects": ["ANY"],
        "components": ["ANY"],
        "tools": ["ANY"],
    }
    default_options = {"variant": _VARIANTS["default"], **_DEFAULT}

    @property
    def _prefix(self) -> str:
        # The same template hermetic reads (recipe.Recipe.prefix): one source for the install prefix.
        return str(self.conan_data["install_prefix"]).format(
            name=self.name, variant=self.options.variant, version=self.version
        )

    def validate(self) -> None:
        allowed = self.conan_data["option_values"]
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", str(self.options.variant)):
            raise ConanInvalidConfiguration(f"variant name {self.options.variant!r} is not a valid path component")
        for opt in ("targets", "projects", "tools"):
            bad = [v for v in _split(self.options.get_safe(opt)) if v not in allowed[opt]]
            if bad:
                raise ConanInvalidConfiguration(
                    f"option {opt}: unknown value(s) {', '.join(bad)}; valid: {', '.join(allowed[opt])}"
                )
        if not _split(self.options.targets):
            raise ConanInvalidConfiguration("option targets: at least one target is needed")
        if "llvm" not in _split(self.options.projects):
            raise ConanInvalidConfiguration("option projects: must include llvm")
        for comp in _split(self.options.components):
            if comp not in allowed["components"] and not _LIBRARY.match(comp):
                raise ConanInvalidConfiguration(
                    f"option components: unknown component {comp!r}; valid: LLVM<Library>, MLIR<Library>, "
                    + ", ".join(allowed["components"])
                )

    def layout(self) -> None:
        cmake_layout(self, src_folder="src")

    def source(self) -> None:
        # hermetic hands over an archive it has already verified (full or pruned);
        # we check its digest again so the recipe never trusts a path blindly.
        archive = self.conf.get("user.hermetic:source_archive")
        if archive:
            expected = self.conf.get("user.hermetic:source_sha256")
            if not expected:
                raise ConanException("user.hermetic:source_archive needs user.hermetic:source_sha256")
            check_sha256(self, archive, expected)
            unzip(self, archive, destination=self.source_folder, strip_root=True)
            return
        entry = self.conan_data["sources"][self.version]["archives"][0]
        get(self, entry["url"], sha256=entry["sha256"], strip_root=True)

    def generate(self) -> None:
        tc = CMakeToolchain(self, generator="Ninja")
        projects = [p for p in _split(self.options.projects) if p != "llvm"]
        tools = _split(self.options.tools)
        # Paths of this build must not reach the outputs: the tree is byte-identical
        # whichever directory it was built in.
        maps = [f"-ffile-prefix-map={self.source_folder}=/usr/src/llvm", f"-ffile-prefix-map={self.build_folder}=/usr/src/llvm-build"]
        tc.extra_cflags += maps
        tc.extra_cxxflags += maps
        tc.cache_variables.update(
            {
                "CMAKE_INSTALL_PREFIX": self._prefix,
                "LLVM_TARGETS_TO_BUILD": str(self.options.targets),
                "LLVM_ENABLE_PROJECTS": ";".join(projects),
                "LLVM_DISTRIBUTION_COMPONENTS": str(self.options.components),
                "LLVM_BUILD_TOOLS": False,
                "LLVM_BUILD_UTILS": bool(tools),
                "LLVM_INSTALL_UTILS": bool(tools),
                "LLVM_INCLUDE_TESTS": False,
                "LLVM_INCLUDE_EXAMPLES": False,
                "LLVM_INCLUDE_BENCHMARKS": False,
                "LLVM_INCLUDE_DOCS": False,
                "LLVM_BUILD_DOCS": False,
                "LLVM_ENABLE_BINDINGS": False,
                "LLVM_ENABLE_OCAMLDOC": False,
                "LLVM_ENABLE_ASSERTIONS": False,
                "LLVM_ENABLE_RTTI": True,
                "LLVM_ENABLE_PIC": True,
                "BUILD_SHARED_LIBS": False,
                "LLVM_BUILD_LLVM_DYLIB": False,
                "LLVM_LINK_LLVM_DYLIB": False,
                "LLVM_ENABLE_LTO": "OFF",
                "LLVM_APPEND_VC_REV": False,
                "LLVM_ENABLE_ZLIB": "OFF",
                "LLVM_ENABLE_ZSTD": "OFF",
                "LLVM_ENABLE_TERMINFO": False,
                "LLVM_ENABLE_LIBXML2": "OFF",
                "LLVM_ENABLE_LIBEDIT": False,
                "LLVM_ENABLE_LIBPFM": False,
                "LLVM_ENABLE_CURL": False,
                "LLVM_ENABLE_HTTPLIB": False,
                "LLVM_ENABLE_FFI": False,
                "LLVM_ENABLE_Z3_SOLVER": False,
                # LLVM's configure probes the Python it finds for pygments and yaml and writes the
                # answer into LLVMConfig.cmake (LLVM_HAVE_OPT_VIEWER_MODULES): the probe is
                # answered here, so the tree does not depend on the machine's Python packages.
                "PY_PYGMENTS_FOUND": False,
                "PY_PYGMENTS_LEXERS_C_CPP_FOUND": False,
                "PY_YAML_FOUND": False,
                "MLIR_ENABLE_BINDINGS_PYTHON": False,
                "MLIR_INCLUDE_TESTS": False,
            }
        )
        if cross_building(self):
            tc.cache_variables.update(self._cross_variables(tc.cache_variables))
        tc.generate()

    def _cross_variables(self, variables: dict) -> dict:
        """What LLVM's cross-compiling guide asks for, from the profile pair (-pr:h target, -pr:b build machine).

        CMAKE_SYSTEM_NAME/PROCESSOR come from Conan's CMakeToolchain, which sets them when the two
        profiles' os/arch differ. LLVM_HOST_TRIPLE is the target's (the host profile's
        user.hermetic:llvm_host_triple). Tablegen must run on the build machine: LLVM builds it in a
        nested native CMake build (cmake/modules/CrossCompile.cmake, `NATIVE`) configured with
        CROSS_TOOLCHAIN_FLAGS_NATIVE, and without those flags that build takes whatever compiler is on
        PATH. So they name the build profile's compilers and CMake includes (the pinned zig wrappers
        for the build machine and reproducible.cmake) and the outer configure's own settings. That
        keeps one Conan build per tree rather than a separate tablegen package for
        LLVM_NATIVE_TOOL_DIR, at the cost of building tablegen in each cross build.
        """
        triple = self.conf.get("user.hermetic:llvm_host_triple", check_type=str)
        if not triple:
            raise ConanInvalidConfiguration(
                "a cross build needs the target's LLVM triple in conf user.hermetic:llvm_host_triple "
                "(hermetic's zig profile sets it)"
            )
        compilers = self.conf_build.get("tools.build:compiler_executables", default={}, check_type=dict)
        includes = self.conf_build.get("tools.cmake.cmaketoolchain:user_toolchain", default=[], check_type=list)
        lines = ["# Generated by the llvm recipe: the build machine's toolchain for LLVM's native tablegen build."]
        lines += [f'set(CMAKE_{lang}_COMPILER "{compilers[key]}")' for lang, key in (("C", "c"), ("CXX", "cpp"))
                  if compilers.get(key)]
        lines += [f'include("{path}")' for path in includes]
        native = Path(self.generators_folder) / "native-toolchain.cmake"
        native.write_text("\n".join(lines) + "\n")
        # CrossCompile.cmake passes these as separate arguments of one command: none may hold a `;`.
        same = {k: {True: "ON", False: "OFF"}.get(v, v) for k, v in variables.items() if k not in _NOT_NATIVE}
        lists = sorted(k for k, v in same.items() if ";" in str(v))
        if lists:
            raise ConanException(f"cannot pass list values to LLVM's native build: {', '.join(lists)}")
        flags = [f"-DCMAKE_TOOLCHAIN_FILE={native}", *(f"-D{k}={v}" for k, v in same.items())]
        return {"LLVM_HOST_TRIPLE": triple, "CROSS_TOOLCHAIN_FLAGS_NATIVE": ";".join(flags)}

    def build(self) -> None:
        cmake = CMake(self)
        cmake.configure(build_script_folder="llvm")
        # The number of commands of the distribution target goes into hermetic's record.
        out = Path(self.build_folder)
        self.run(f"ninja -C {shlex.quote(str(out))} -t commands distribution > hermetic-commands.txt", cwd=str(out))
        cmake.build(target="distribution")

    def package(self) -> None:
        dest = shlex.quote(self.package_folder)
        self.run(
            f"DESTDIR={dest} cmake --build {shlex.quote(self.build_folder)} --target install-distribution",
            cwd=self.build_folder,
        )

    def package_info(self) -> None:
        # Consumers use LLVM's own LLVMConfig.cmake, not a Conan-generated one.
        self.cpp_info.set_property("cmake_find_mode", "none")
        prefix = self._prefix.lstrip("/")
        self.cpp_info.builddirs = [os.path.join(prefix, "lib", "cmake", "llvm")]
        self.cpp_info.includedirs = [os.path.join(prefix, "include")]
        self.cpp_info.libdirs = [os.path.join(prefix, "lib")]
