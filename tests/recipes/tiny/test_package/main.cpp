// Prints the version (proves headers, the configuration header and TinySupport link), then what the
// library computes from every generated part, and with TinyDemangle a demangled name.
#include "tiny/Support.h"
#include <cstdio>
#ifdef HAVE_DEMANGLE
#include "tiny/Demangle.h"
#endif

int main() {
  std::printf("%s\n", tiny::versionString().c_str());
  std::printf("parts %ld\n", tiny::partsChecksum());
#ifdef HAVE_DEMANGLE
  std::printf("demangled %s\n", tiny::demangle("_T5hello").c_str());
#endif
  return 0;
}
