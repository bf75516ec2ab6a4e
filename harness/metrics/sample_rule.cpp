#include "harness/metrics/sample_rule.h"

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/backend/stable_hash.h"
#include "harness/base/check.h"

namespace parity {

SampleRule sample_rule(std::uint64_t seed, SourceKind kind, std::string_view site_name,
                       std::int64_t n, std::int64_t factor) {
  PARITY_CHECK(n >= 0, "sample_rule: negative population " + std::to_string(n));
  PARITY_CHECK(factor >= 1, "sample_rule: factor " + std::to_string(factor) + " < 1");
  SampleRule rule;
  rule.count = (n + factor - 1) / factor;
  if (n <= 1) return rule;
  // The separator keeps ("router_logits", "x") and ("router_logit", "sx") apart.
  const std::string key = std::string(to_string(kind)) + '\x1f' + std::string(site_name);
  const std::uint64_t un = static_cast<std::uint64_t>(n);
  rule.start = static_cast<std::int64_t>(seed_for(seed, key, 0) % un);
  // A stride in [1, n) moved up to the next value coprime with n (1 always is),
  // so the count <= n positions are distinct.
  std::int64_t stride = static_cast<std::int64_t>(seed_for(seed, key, 1) % un);
  if (stride == 0) stride = 1;
  while (std::gcd(stride, n) != 1) stride = stride + 1 == n ? 1 : stride + 1;
  rule.stride = stride;
  return rule;
}

at::Tensor sample_positions(const SampleRule& rule, std::int64_t n) {
  std::vector<std::int64_t> positions;
  positions.reserve(static_cast<std::size_t>(rule.count));
  // Added step by step (p + stride < 2n): (start + i * stride) mod n without
  // the product overflowing.
  std::int64_t p = rule.start;
  for (std::int64_t i = 0; i < rule.count; ++i) {
    positions.push_back(p);
    p = (p + rule.stride) % n;
  }
  return at::tensor(positions, at::TensorOptions().dtype(at::kLong));
}

}  // namespace parity
