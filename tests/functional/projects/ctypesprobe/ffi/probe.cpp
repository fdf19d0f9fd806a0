// The C API Python calls through ctypes: LLVM's demangler and xxh3, answered by the static LLVM linked in.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Demangle/Demangle.h"
#include "llvm/Support/xxhash.h"

#define API extern "C" __attribute__((visibility("default")))

API int PROBE_LLVMVersionMajor() { return LLVM_VERSION_MAJOR; }

API uint64_t PROBE_XXH3(const uint8_t *data, size_t len) { return llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(data, len)); }

// A malloc'd string the caller frees with PROBE_Free.
API char *PROBE_Demangle(const char *name) {
  std::string out = llvm::demangle(name);
  char *buf = static_cast<char *>(std::malloc(out.size() + 1));
  std::memcpy(buf, out.c_str(), out.size() + 1);
  return buf;
}

API void PROBE_Free(char *p) { std::free(p); }
