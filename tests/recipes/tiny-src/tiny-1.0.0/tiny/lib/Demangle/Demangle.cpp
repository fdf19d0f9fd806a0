#include "tiny/Demangle.h"

#include <cctype>

namespace tiny {
std::string demangle(const std::string &name) {
  if (name.size() < 3 || name.compare(0, 2, "_T") != 0 || !std::isdigit(static_cast<unsigned char>(name[2])))
    return name;
  size_t i = 2, len = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
    len = len * 10 + static_cast<size_t>(name[i++] - '0');
  return i + len == name.size() ? name.substr(i, len) : name;
}
} // namespace tiny
