#pragma once
// An exception that names its kind besides its message: a stable tag its
// thrower owns. Where an exception becomes data (a rank's end, read in another
// thread or process: harness/runtime), the kind travels as a field of its own,
// so that what reads it compares kinds and never searches messages.
#include <string_view>

namespace parity {

class KindedError {
 public:
  virtual ~KindedError() = default;
  virtual std::string_view error_kind() const noexcept = 0;
};

}  // namespace parity
