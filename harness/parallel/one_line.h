#pragma once
// Error text as parity's one-line messages quote it.
#include <algorithm>
#include <string>

namespace parity {

// Newlines and tabs to spaces, runs of spaces folded, trimmed, at most `max`
// characters.
inline std::string one_line(const std::string& text, std::size_t max = 600) {
  std::string out;
  out.reserve(std::min(text.size(), max));
  bool space = false;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (c == ' ' && (space || out.empty())) continue;
    space = c == ' ';
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > max) out = out.substr(0, max - 3) + "...";
  return out;
}

}  // namespace parity
