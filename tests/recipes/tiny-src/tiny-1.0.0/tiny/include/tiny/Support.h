#ifndef TINY_SUPPORT_H
#define TINY_SUPPORT_H

#include <string>

namespace tiny {
// "Tiny <version>", from the configuration header this build generated.
std::string versionString();
// The sum of what every generated part contributes: proves each translation unit was linked.
long partsChecksum();
// The message a failed check reports.
std::string errorMessage(const std::string &what);
} // namespace tiny

#endif
