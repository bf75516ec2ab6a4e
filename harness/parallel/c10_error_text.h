#pragma once
// The text of an exception thrown by c10d / Gloo, as parity's one-line errors
// quote it: c10::Error without its C++ backtrace, newlines folded to spaces.
// For the .cpp files that call into c10d (rendezvous, transports) only.
#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "harness/parallel/one_line.h"

namespace parity {

inline std::string c10_error_text(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e))
    return one_line(c10e->what_without_backtrace());
  return one_line(e.what());
}

}  // namespace parity
