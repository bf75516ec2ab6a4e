#pragma once
// One check macro (gloo's GLOO_ENFORCE): the condition that must hold, then
// the parts of the message, streamed together.
//   PARITY_CHECK(cond, parts...)           bad input: std::invalid_argument with
//                                          the one line a person reads.
//   PARITY_CHECK_INTERNAL(cond, parts...)  a broken invariant, i.e. a parity bug:
//                                          std::logic_error "file:line: parts...".
//   PARITY_FAIL / PARITY_FAIL_INTERNAL     the same, unconditionally (inside a
//                                          branch that already decided).
// Parts go through operator<<: pass doubles pre-formatted where the spelling
// matters (std::to_string, format_number).
#include <sstream>
#include <string>

namespace parity::detail {

template <typename... Parts>
std::string join_message(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

[[noreturn]] void throw_invalid_argument(const std::string& message);
// `file` is shortened to its path from the repository root (harness/..., reference/..., cuda/...).
[[noreturn]] void throw_internal_error(const char* file, int line, const std::string& message);

}  // namespace parity::detail

#define PARITY_FAIL(...) \
  ::parity::detail::throw_invalid_argument(::parity::detail::join_message(__VA_ARGS__))
#define PARITY_FAIL_INTERNAL(...)                            \
  ::parity::detail::throw_internal_error(__FILE__, __LINE__, \
                                         ::parity::detail::join_message(__VA_ARGS__))
#define PARITY_CHECK(cond, ...)            \
  do {                                     \
    if (!(cond)) PARITY_FAIL(__VA_ARGS__); \
  } while (0)
#define PARITY_CHECK_INTERNAL(cond, ...)            \
  do {                                              \
    if (!(cond)) PARITY_FAIL_INTERNAL(__VA_ARGS__); \
  } while (0)
