#pragma once
// What the property files share: result building, error tracking and the
// comparisons of observations, losses and metrics between two runs.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>

#include "harness/checks/properties.h"
#include "harness/parallel/topology.h"

namespace parity::checks::detail {

std::string num(double v);
bool counting_phase(const std::string& phase);  // eager or record
// The source kind of a --metrics name, kParameterMetricKind for the optimizer's
// norms (metric_names.h MetricSource::parameters), "" when unknown (the logged
// MoE statistics).
inline constexpr const char* kParameterMetricKind = "parameters";
std::string metric_kind(const std::string& metric);
std::string run_list(const std::vector<const CheckRun*>& runs);  // "(a), (b), (c)"
// Which piece of parameter `name` rank `rank` holds when the parameter is
// sharded: its TP rank, a routed expert's its expert TP rank (etp).
int shard_piece(const ParallelTopology& topology, int rank, const std::string& name);

// The sharded runs compared with the single-rank run (sharded_reduction,
// sharded_gradients): the scenario and its eager run without recompute; with
// dropout on several ranks (per-rank masks: not one rank's computation) the
// sharding without recompute, graphs or dropout instead.
std::vector<RunVariant> sharded_runs(const RunConfig& scenario);

using ObsKey = std::tuple<int, std::int64_t, std::int64_t, std::string>;  // rank, step, mb, site
// Step observations (eager/record) by (rank, step, microbatch, site) -> digest.
std::map<ObsKey, std::string> step_digests(const CheckRun& run);
std::string where(const std::string& run, const ObsKey& k);

PropertyResult make(std::string name, std::string compared);              // status PASS
void fail(PropertyResult& p, std::string reason, std::string site = "");  // keeps the first
// Turns a result that compared nothing into SKIP with its reason and hint.
PropertyResult& skip(PropertyResult& p, std::string reason, std::string hint);

struct ErrorTracker {
  double max_abs = 0, max_rel = 0;
  std::string site, label;
  bool any = false;
  void add(double abs_err, double rel_err, const std::string& s, const std::string& l);
  void into(PropertyResult& p) const;
};

// Bitwise comparison of a's step observations (those `keep` accepts) against c's.
std::int64_t compare_observations(const CheckRun& a, const CheckRun& c, PropertyResult& p,
                                  const std::function<bool(const ObsKey&)>& keep);
// Losses and logits bitwise for steps < identical; later steps (weights updated
// with gradients that differ by rounding) compare losses within `tol`.
// `basis` names the tolerance's precision in a FAIL ("fp32 (fp64 model, ...)").
void compare_losses(const CheckRun& a, const CheckRun& c, PropertyResult& p,
                    std::int64_t identical = 1 << 30, double tol = 0,
                    const std::string& basis = "");
// Metric values of `a` against `c`, bitwise, for steps with identical weights;
// `keep(step, kind)` filters.
std::int64_t compare_metrics_exact(
    const CheckRun& a, const CheckRun& c, PropertyResult& p,
    const std::function<bool(std::int64_t, const std::string&)>& keep);

}  // namespace parity::checks::detail
