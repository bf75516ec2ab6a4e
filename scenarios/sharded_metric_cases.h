#pragma once
// Sharded metric cases: one observed tensor [seq, batch, hidden] split over
// tp x cp x dp with UNEVEN and EMPTY shards and uneven microbatches, fed to the
// metric collector on thread ranks and compared with each statistic of the
// full tensor (contract.md section 5, sharded_reduction). The model's layouts
// never produce such shards (Megatron splits evenly), yet Megatron's metric
// core allows them (megatron-reference 3.1, 7.15), and only unequal
// populations expose a mean of per-rank means. docs/property-suite.md.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <rapidcheck.h>

namespace parity::scenarios {

struct ShardedMetricCase {
  int tp = 1, cp = 1, dp = 1;
  std::int64_t seq = 4, batch = 2, hidden = 4;
  // tp: Replica (residuals without SP) or Shard(tp_dim): 0 = sequence (SP
  // residuals), 2 = hidden (vocab-parallel logits, attention context).
  bool tp_replica = false;
  int tp_dim = 0;
  // Shard sizes per rank of each axis (sum = the split dim); tp_split is
  // unused under Replica. cp splits dim 0, dp dim 1 (after dp, microbatches
  // split each dp rank's batch: 1 or 2, the second possibly empty).
  std::vector<std::int64_t> tp_split, cp_split, dp_split;
  int microbatches = 1;
  std::vector<std::string> statistics;  // "l2", "mean", "rms", "max", "min", "mean-row-l2", ...
  std::uint64_t seed = 1;
  std::vector<std::string> inject;  // code-path faults switched on in every rank
};

nlohmann::json to_json(const ShardedMetricCase& c);

// Every statistic a case may name.
const std::vector<std::string>& sharded_case_statistics();

rc::Gen<ShardedMetricCase> gen_sharded_metric_case();

struct ShardedMetricOutcome {
  std::string rank_failure;             // non-empty: the launch failed (rank, coordinates, ...)
  std::vector<std::string> mismatches;  // "rank 1: mean@global = 0.3, the full tensor gives 0.2"
  int compared = 0;
  bool passed() const { return rank_failure.empty() && mismatches.empty(); }
};

// Runs `c` on tp*cp*dp thread ranks (Gloo) and compares every rank's results.
ShardedMetricOutcome check_sharded_metric_case(const ShardedMetricCase& c);

// rapidcheck prints counterexamples through this (ADL).
void showValue(const ShardedMetricCase& c, std::ostream& os);

}  // namespace parity::scenarios
