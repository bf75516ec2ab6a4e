#pragma once
// Which elements of a population the sampled median keeps
// (megatron-reference.md section 3.6): ceil(n / factor) of the n elements, at
// positions (start + i * stride) mod n for i = 0, 1, ..., with start and stride
// drawn from a hash of (seed, kind, site name) and stride coprime with n, so
// the positions are distinct.
//
// Megatron hashes with 128-bit blake2b; parity uses its stable 64-bit FNV-1a
// (harness/backend/stable_hash.h, `seed_for`): the same on every platform and
// run, which is all the rule needs (the positions are not meant to match
// Megatron's bit for bit).
#include <cstdint>
#include <string_view>

#include <ATen/ATen.h>

#include "harness/observation/source_kind.h"

namespace parity {

struct SampleRule {
  std::int64_t start = 0;   // in [0, n)
  std::int64_t stride = 1;  // in [1, n), gcd(stride, n) = 1 (1 when n <= 1)
  std::int64_t count = 0;   // ceil(n / factor)
};

// The rule for a population of `n` elements of site `site_name` (its full
// name). Throws std::invalid_argument for n < 0 or factor < 1.
SampleRule sample_rule(std::uint64_t seed, SourceKind kind, std::string_view site_name,
                       std::int64_t n, std::int64_t factor);

// The rule's positions, in draw order: an int64 tensor of `rule.count`
// distinct indices in [0, n).
at::Tensor sample_positions(const SampleRule& rule, std::int64_t n);

}  // namespace parity
