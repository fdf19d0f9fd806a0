# Shared by the projects of this source tree, as llvm-project's top-level cmake/ is.
set(TINY_VERSION_MAJOR 1)
set(TINY_VERSION_MINOR 0)
set(TINY_VERSION_PATCH 0)
