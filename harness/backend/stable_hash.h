#pragma once
// A stable 64-bit hash (FNV-1a) for deterministic seeds: the same on every
// platform, compiler and run (std::hash promises none of that). Weights, inputs
// and RNG streams derive their seeds from it.
#include <cstdint>
#include <string_view>

namespace parity {

inline constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;
inline constexpr std::uint64_t kFnvPrime = 1099511628211ull;

constexpr std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t h = kFnvOffset) {
  for (char c : bytes) {
    h ^= static_cast<std::uint8_t>(c);
    h *= kFnvPrime;
  }
  return h;
}

// Mixes an integer (little-endian, 8 bytes) into the hash.
constexpr std::uint64_t fnv1a64(std::uint64_t value, std::uint64_t h) {
  for (int i = 0; i < 8; ++i) {
    h ^= (value >> (8 * i)) & 0xffu;
    h *= kFnvPrime;
  }
  return h;
}

// seed_for(seed, "decoder.layers.0.mlp.linear_fc1.weight"): the seed of one
// deterministic stream. A separator byte keeps ("ab", 1) and ("a", ...) apart.
constexpr std::uint64_t seed_for(std::uint64_t seed, std::string_view name) {
  return fnv1a64(name, fnv1a64(std::string_view("\x1f", 1), fnv1a64(seed, kFnvOffset)));
}
constexpr std::uint64_t seed_for(std::uint64_t seed, std::string_view name, std::uint64_t index) {
  return fnv1a64(index, fnv1a64(std::string_view("\x1f", 1), seed_for(seed, name)));
}

}  // namespace parity
