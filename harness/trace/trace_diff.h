#pragma once
// parity diff: compares two traces (docs/trace-format.md) site by site. Records
// are grouped by (rank, step, microbatch, site, phase); a group must have the
// same number of records on both sides, and the i-th records of a group the
// same shape, dtype, NaN/Inf counts and, within the dtype's tolerance, the same
// sum, sum_sq, min and max. The tolerance rule itself lives above this floor
// (harness/checks/tolerance.h); the caller passes it in as `close`.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/trace/trace_reader.h"

namespace parity {

struct TraceDiffOptions {
  // Only records of these kinds (Megatron's spelling) are compared; empty = all.
  std::vector<std::string> kinds;
  // Whether two values of a statistic of dtype `dtype` agree; fills `rule` with
  // the tolerance in words (e.g. "fp32 rel 1e-05") and `rel` with the error.
  std::function<bool(const std::string& dtype, double a, double b, double* rel, std::string* rule)>
      close;
};

struct TraceDiffResult {
  bool equal = true;
  std::int64_t compared = 0;  // record pairs compared
  // The first divergence, in the order of A's records (then B's groups A lacks):
  // one line naming the site, its coordinates, both values and the rule.
  std::string first_divergence;
};

TraceDiffResult diff_traces(const std::vector<TraceLine>& a, const std::string& a_name,
                            const std::vector<TraceLine>& b, const std::string& b_name,
                            const TraceDiffOptions& options);

}  // namespace parity
