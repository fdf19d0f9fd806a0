# Included by every hermetic CMake build (Conan's user_toolchain, and the wheel builds).
# Together with SOURCE_DATE_EPOCH, LC_ALL=C, TZ=UTC and umask 022 set by hermetic's
# sandbox, it makes the same inputs give the same bytes.

# Deterministic archives: zero timestamps, uids and modes in static libraries,
# whatever binutils' build-time default is.
foreach(lang C CXX ASM)
  set(CMAKE_${lang}_ARCHIVE_CREATE "<CMAKE_AR> qcD <TARGET> <LINK_FLAGS> <OBJECTS>")
  set(CMAKE_${lang}_ARCHIVE_APPEND "<CMAKE_AR> qD <TARGET> <LINK_FLAGS> <OBJECTS>")
  set(CMAKE_${lang}_ARCHIVE_FINISH "<CMAKE_RANLIB> -D <TARGET>")
endforeach()

# Build ids are hashes of the content, never random.
string(APPEND CMAKE_EXE_LINKER_FLAGS_INIT " -Wl,--build-id=sha1")
string(APPEND CMAKE_SHARED_LINKER_FLAGS_INIT " -Wl,--build-id=sha1")
string(APPEND CMAKE_MODULE_LINKER_FLAGS_INIT " -Wl,--build-id=sha1")

# hermetic passes the source and build directories to map out of debug info and __FILE__.
if(DEFINED ENV{HERMETIC_PREFIX_MAPS})
  string(APPEND CMAKE_C_FLAGS_INIT " $ENV{HERMETIC_PREFIX_MAPS}")
  string(APPEND CMAKE_CXX_FLAGS_INIT " $ENV{HERMETIC_PREFIX_MAPS}")
endif()
