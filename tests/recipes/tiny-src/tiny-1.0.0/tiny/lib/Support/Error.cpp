#include "tiny/Support.h"

namespace tiny {
// The prefix is a fixed string in this object: the compile cache tests look for it.
std::string errorMessage(const std::string &what) { return "TINY ERROR: " + what; }
} // namespace tiny
