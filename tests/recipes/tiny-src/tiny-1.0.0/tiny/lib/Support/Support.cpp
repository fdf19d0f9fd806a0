#include "tiny/Config/tiny-config.h"
#include "tiny/Support.h"

namespace tiny {
// Parts.def lists the generated parts, TINY_PART(N) each.
#define TINY_PART(N) long partSum##N();
#include "Parts.def"
#undef TINY_PART

std::string versionString() { return std::string("Tiny ") + TINY_VERSION_STRING; }

long partsChecksum() {
  long sum = 0;
#define TINY_PART(N) sum += partSum##N();
#include "Parts.def"
#undef TINY_PART
  return sum;
}
} // namespace tiny
