#pragma once
// A tensor shape as error messages print it: "[192, 64]".
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>

namespace parity {

inline std::string shape_text(c10::ArrayRef<std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace parity
