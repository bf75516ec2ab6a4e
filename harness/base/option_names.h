#pragma once
// One spelling table per enum option: the CLI/JSON spelling of each value
// ("full-iteration"), read by to_string, the parsers, --help and the error
// lines alike. An enum opts in with an `option_names(E)` overload (found by
// ADL) returning its table, defined beside the enum.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace parity {

template <typename E, std::size_t N>
struct OptionNames {
  std::pair<E, std::string_view> entries[N];

  constexpr std::string_view name(E v) const {
    for (const auto& [e, s] : entries)
      if (e == v) return s;
    return "?";
  }
  constexpr std::optional<E> parse(std::string_view s) const {
    for (const auto& [e, n] : entries)
      if (n == s) return e;
    return std::nullopt;
  }
  // Every entry named, no value or spelling twice: a table declared longer
  // than its entries leaves empty names (static_assert it beside the table).
  constexpr bool complete() const {
    for (std::size_t i = 0; i < N; ++i) {
      if (entries[i].second.empty()) return false;
      for (std::size_t j = 0; j < i; ++j)
        if (entries[i].first == entries[j].first || entries[i].second == entries[j].second)
          return false;
    }
    return true;
  }
  // "a, b, c": the accepted spellings, for messages and help text.
  std::string known() const {
    std::string out;
    for (const auto& [e, n] : entries) {
      if (!out.empty()) out += ", ";
      out += n;
    }
    return out;
  }
};

template <typename E>
constexpr std::string_view option_name(E v) {
  return option_names(v).name(v);
}
template <typename E>
std::optional<E> parse_option(std::string_view s) {
  return option_names(E{}).parse(s);
}
template <typename E>
std::string known_options() {
  return option_names(E{}).known();
}

}  // namespace parity
