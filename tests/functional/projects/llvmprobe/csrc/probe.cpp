// Calls into the static LLVMSupport/LLVMDemangle across the C++ ABI (std::string, std::string_view),
// so a wheel whose compiler differs from LLVM's (libc++ against libstdc++) fails to link or load.
#include <cstdint>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Demangle/Demangle.h"
#include "llvm/Support/xxhash.h"

namespace nb = nanobind;

NB_MODULE(_probe, m) {
  m.def("llvm_version", [] { return std::string(LLVM_VERSION_STRING); });
  m.def("demangle", [](const std::string &name) { return llvm::demangle(name); });
  m.def("xxh3", [](nb::bytes data) {
    auto *p = static_cast<const uint8_t *>(data.data());
    return llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(p, data.size()));
  });
}
