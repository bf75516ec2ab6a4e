#pragma once
// The draws every generator piece is made of (generators.cpp,
// pipeline_generators.cpp): each shrinks toward its first choice. Call them only
// inside rc::gen::exec or a property (they use operator*).
#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

#include <rapidcheck.h>

namespace parity::scenarios {

// A uniform index in [0, n) that shrinks toward 0 (rapidcheck's
// element/weightedElement do not shrink at all; inRange does, but scales with
// the size, which would skew small case counts toward the first choices).
inline std::size_t index_below(std::size_t n) {
  return *rc::gen::resize(rc::kNominalSize, rc::gen::inRange<std::size_t>(0, n));
}

// A weighted choice that shrinks toward the first alternative.
template <typename T>
T weighted(std::initializer_list<std::pair<std::size_t, T>> choices) {
  std::size_t total = 0;
  for (const auto& c : choices) total += c.first;
  std::size_t r = index_below(total);
  for (const auto& c : choices) {
    if (r < c.first) return c.second;
    r -= c.first;
  }
  return choices.begin()->second;
}
// Equal weights, in the order given.
template <typename T>
T one_of(const std::vector<T>& choices) {
  return choices[index_below(choices.size())];
}
inline bool sometimes(std::size_t in_how_many) {
  return weighted<bool>({{in_how_many - 1, false}, {1, true}});
}

}  // namespace parity::scenarios
