#include "harness/base/check.h"

#include <cstring>
#include <stdexcept>

namespace parity::detail {

void throw_invalid_argument(const std::string& message) { throw std::invalid_argument(message); }

void throw_internal_error(const char* file, int line, const std::string& message) {
  // __FILE__ is absolute in CMake builds: keep the part from the room down.
  const char* shown = file;
  for (const char* room : {"/harness/", "/reference/", "/cuda/", "/scenarios/"})
    if (const char* at = std::strstr(file, room)) {
      shown = at + 1;
      break;
    }
  throw std::logic_error(std::string(shown) + ":" + std::to_string(line) + ": " + message);
}

}  // namespace parity::detail
