#pragma once
// The cross-checks of contract.md section 5 that apply on the reference
// backend, as pure functions over runs read back by parity check (run_data.h).
// docs/properties.md says what each compares and with which tolerance.
#include <optional>
#include <string>
#include <vector>

#include "harness/checks/run_data.h"

namespace parity::checks {

enum class Status { pass, fail, skip };
std::string_view to_string(Status s);  // "PASS", "FAIL", "SKIP"

struct PropertyResult {
  std::string name;
  Status status = Status::skip;
  std::string compared;  // which runs: "(a) vs (c)"
  std::string reason;    // FAIL: the first violation; SKIP: why it does not apply; PASS: a summary
  std::optional<double> max_abs, max_rel;
  std::string worst_site, worst_label;
  std::string note;  // e.g. "losses bitwise; 24/26 gradients bitwise, the rest within fp32 rel 1e-6"
};

// One compared metric value (sharded_reduction's per-metric table).
struct MetricComparison {
  std::string run;  // "a" or "c"
  std::int64_t step = 0;
  std::string metric, label;
  double value = 0, reference = 0;
  double abs_err = 0, rel_err = 0;
  bool ok = true;
};

// Relative tolerances by dtype (docs/properties.md).
double metric_tolerance(DType dtype);    // sharded_reduction: fp64 1e-10, fp32 1e-5, bf16 5e-2
double gradient_tolerance(DType dtype);  // recompute_invariance: fp64 1e-12, fp32 1e-6, bf16 1e-2
// |x - y| <= tol * max(|y|, 1); NaN equals NaN, an infinity equals itself.
bool within(double x, double y, double tol, double* abs_err = nullptr, double* rel_err = nullptr);

// The number of leading steps whose weights are identical in both runs: step 0,
// plus every step after one whose gradients were bitwise equal on every rank
// (or every step when lr = 0). Bitwise comparisons of observed values apply there.
std::int64_t steps_with_identical_weights(const CheckRun& a, const CheckRun& c);

// Sites inside a per-layer graphed region (absent on replay steps).
bool inside_graphed_layer(const std::string& kind);

// Counts: every (rank, step, microbatch, site, phase) observed as often as the
// scenario's graph phases say. Order: a run with recompute or graphs is compared
// with a run of `runs` with its sharding and neither (the reference, (c)): per
// rank, step and microbatch, the sites observed in eager/record phase come in the
// reference's order (restricted to the sites the graphs leave observable), and
// without recompute with the reference's grad mode (a checkpointed forward is
// observed under no-grad, so grad modes differ by design with recompute).
PropertyResult check_exactly_once(const std::vector<const CheckRun*>& runs);
// SKIPs without recompute, and under full-iteration graphs with graph warmup 0
// (every step is captured or replayed, both bypass checkpoints: nothing recomputes).
PropertyResult check_recompute_invariance(const CheckRun& a, const CheckRun& c);
// Every metric of each run in `sharded` against `single` (b); rows receives every comparison.
PropertyResult check_sharded_reduction(const CheckRun& single,
                                       const std::vector<const CheckRun*>& sharded,
                                       std::vector<MetricComparison>* rows);
// `c` is the eager reference with the same recompute as `a` (run (d), or (c)
// when a has no recompute). `alias_failure`: a rank failure of (a) that reported prepared state aliasing
// the observed tensor ("" when none).
PropertyResult check_graph_replay(const CheckRun& a, const CheckRun& c,
                                  const std::string& alias_failure = "");
PropertyResult check_determinism(const CheckRun& a, const CheckRun& again);
PropertyResult check_collective_symmetry(const std::vector<const CheckRun*>& runs);

}  // namespace parity::checks
