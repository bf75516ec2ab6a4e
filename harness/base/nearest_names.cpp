#include "harness/base/nearest_names.h"

#include <algorithm>
#include <cctype>

namespace parity {
namespace {

std::string normalized(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal string alignment distance (Damerau-Levenshtein without repeated edits
// of one substring): enough for typos, three rows of memory.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = b.size();
  std::vector<std::size_t> before(n + 1), previous(n + 1), current(n + 1);
  for (std::size_t j = 0; j <= n; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const std::size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[n];
}

}  // namespace

std::vector<std::string> nearest_names(std::string_view word,
                                       const std::vector<std::string>& known) {
  const std::string w = normalized(word);
  const std::size_t limit = w.size() <= 3 ? 1 : w.size() <= 7 ? 2 : 3;
  std::size_t best = limit + 1;
  std::vector<std::string> nearest;
  for (const std::string& name : known) {
    const std::size_t d = edit_distance(w, normalized(name));
    if (d > best) continue;
    if (d < best) nearest.clear(), best = d;
    if (std::find(nearest.begin(), nearest.end(), name) == nearest.end()) nearest.push_back(name);
  }
  return nearest;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& known,
                         std::string_view quote) {
  const std::vector<std::string> nearest = nearest_names(word, known);
  if (nearest.empty()) return "";
  std::string text = "did you mean ";
  for (std::size_t i = 0; i < nearest.size(); ++i) {
    if (i > 0) text += i + 1 == nearest.size() ? " or " : ", ";
    text += std::string(quote) + nearest[i] + std::string(quote);
  }
  return text + "?";
}

}  // namespace parity
