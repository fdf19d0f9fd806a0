#ifndef TINY_DEMANGLE_H
#define TINY_DEMANGLE_H

#include <string>

namespace tiny {
// Undo tiny's toy mangling: "_T3foo" -> "foo"; anything else comes back as it is.
std::string demangle(const std::string &name);
} // namespace tiny

#endif
