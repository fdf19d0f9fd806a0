"""build: the offline builds: the sandbox, the toolchain's wrappers, the compile cache and distcc, the pinned
build tools, the LLVM build step and the wheel build.

Its place among the layers: docs/design.md; `python3 -m devtools.layers` checks it.
"""
