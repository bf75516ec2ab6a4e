#pragma once
// Sharded metric cases: one observed tensor [seq, batch, hidden] held over
// tp x cp x dp, each axis as Shard (UNEVEN and EMPTY pieces), Replica or
// Owned, with uneven microbatches, fed to the
// metric collector on thread ranks and compared with each statistic of the
// full tensor (contract.md section 5, sharded_reduction). The model's layouts
// never produce such shards (Megatron splits evenly), yet Megatron's metric
// core allows them (megatron-reference 3.1, 7.15), and only unequal
// populations expose a mean of per-rank means. docs/property-suite.md.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <rapidcheck.h>
#include <nlohmann/json.hpp>

#include "harness/parallel/topology.h"

namespace parity::scenarios {

// How one axis holds the tensor (harness/metrics/placement.h): split in
// uneven, possibly empty pieces (Shard), whole on every rank (Replica: never
// reduced over), or whole on one rank while the others hold a placeholder
// whose contents must not count (Owned).
enum class AxisHolding { shard, replica, owned };
std::string_view to_string(AxisHolding holding);

struct AxisCase {
  AxisHolding holding = AxisHolding::shard;
  std::vector<std::int64_t> split;  // Shard: piece sizes per axis rank (sum = the split dim)
  int owner = 0;                    // Owned: the axis rank that holds the value
};

struct ShardedMetricCase {
  int tp = 1, cp = 1, dp = 1;
  std::int64_t seq = 4, batch = 2, hidden = 4;
  // Per axis (size > 1 only; an axis of size 1 holds everything). Shard dims:
  // tp 0 (sequence: SP residuals) or 2 (hidden: vocab-parallel logits,
  // attention context); cp 0; dp 1 (after dp, microbatches split each dp
  // rank's batch: 1 or 2, the second possibly empty).
  AxisCase tp_axis, cp_axis, dp_axis;
  int tp_dim = 0;
  int microbatches = 1;
  // "l2", "mean", "rms", "max", "min", "mean-row-l2", ..., "sampled-median"
  // (not run when an axis is Owned: it rejects Owned placements)
  std::vector<std::string> statistics;
  std::uint64_t seed = 1;
  std::vector<std::string> inject;  // code-path faults switched on in every rank

  const AxisCase& axis(Axis a) const;
};

nlohmann::json to_json(const ShardedMetricCase& c);

// Every statistic a case may name.
const std::vector<std::string>& sharded_case_statistics();

rc::Gen<ShardedMetricCase> gen_sharded_metric_case();
// The same, with `axis` of size 2 or more and held as `holding` (the suite's
// "catches replica-overcount on every axis" searches).
rc::Gen<ShardedMetricCase> gen_sharded_metric_case(Axis axis, AxisHolding holding);

struct ShardedMetricOutcome {
  std::string rank_failure;  // non-empty: the launch failed (rank, coordinates, ...)
  // A rank threw CollectiveMismatch (its group's calls differed: collective_symmetry live).
  bool collective_mismatch = false;
  std::vector<std::string> mismatches;  // "rank 1: mean@global = 0.3, the full tensor gives 0.2"
  int compared = 0;
  bool passed() const { return rank_failure.empty() && mismatches.empty(); }
};

// Runs `c` on tp*cp*dp thread ranks (Gloo) and compares every rank's results.
ShardedMetricOutcome check_sharded_metric_case(const ShardedMetricCase& c);

// rapidcheck prints counterexamples through this (ADL).
void showValue(const ShardedMetricCase& c, std::ostream& os);

}  // namespace parity::scenarios
