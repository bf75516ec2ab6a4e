#pragma once
// "Did you mean ...?" for a mistyped name (a scenario key, an option, a fault,
// a metric, a property): the known names within a few edits of it, so an error
// can suggest one instead of listing every name there is.
#include <string>
#include <string_view>
#include <vector>

namespace parity {

// The names of `known` nearest to `word` (Damerau-Levenshtein distance: an
// insertion, deletion, substitution or swap of neighbours is one edit; case and
// '_' vs '-' are free), when near enough to be a typo of it: at most 1 edit for
// words up to 3 characters, 2 up to 7, else 3. Every name at the nearest
// distance, in `known`'s order; empty when none is near.
std::vector<std::string> nearest_names(std::string_view word,
                                       const std::vector<std::string>& known);

// `did you mean "microbatches"?` (or `"tp" or "dp"?` on a tie), with each name
// between `quote`s; empty when no name is near.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& known,
                         std::string_view quote = "\"");

}  // namespace parity
