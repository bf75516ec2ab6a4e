#pragma once
// The cross-checks of contract.md section 5 that parity check evaluates
// (scope_semantics is the property suite's; megatron_conformance tools/megatron's),
// as pure functions over runs read back by parity check (run_data.h),
// one file each under harness/checks/properties/ (each also registers its
// Property there: property.h). docs/properties.md says what each compares and with
// which tolerance (tolerance.h: the one rule).
#include <string>
#include <vector>

#include "harness/checks/property.h"
#include "harness/checks/tolerance.h"

namespace parity::checks {

// |x - y| <= tol * max(|y|, 1); NaN equals NaN, an infinity equals itself.
bool within(double x, double y, double tol, double* abs_err = nullptr, double* rel_err = nullptr);

// The number of leading steps whose weights are identical in both runs: step 0,
// plus every step after one whose gradients were bitwise equal on every rank
// (or every step when lr = 0). Bitwise comparisons of observed values apply there.
std::int64_t steps_with_identical_weights(const CheckRun& a, const CheckRun& c);

// Per-layer graphs of a run of `c`: whether `site` lies in a captured stage of
// its layer (graph_scope.h decides: the whole layer, or the stages
// --graph-scope names), so it is absent on replay steps. False for the sites
// outside the layers' stages (residuals, logits) and without per-layer graphs.
bool captured_by_layer_graphs(const RunConfig& c, const std::string& site);
// Whether some site of source kind `kind` is captured (a metric over that kind
// then misses those observations on replay steps).
bool kind_captured_by_layer_graphs(const RunConfig& c, const std::string& kind);

// The distinct sites one rank observes in a run of `c`: per dense layer two
// norm probes, the attention and MLP probes and two residuals (6); per MoE
// layer the MLP probe's place is taken by router_logits and router_scores,
// plus router_diagnostics where the model observes it (7 or 8); plus the logits;
// plus one mtp_logits site per MTP depth; plus, with --observe-wgrad, one
// weight_gradient site per parameter the rank holds (`parameters`).
// With pp > 1: the sites of pipeline stage `stage`.
std::size_t expected_site_count(const RunConfig& c, std::size_t parameters = 0, int stage = 0);
std::string site_count_rule(const RunConfig& c);  // "6 per layer + the logits"

// Counts: every (rank, step, microbatch, site, phase) observed as often as the
// scenario's graph phases say. Order: a run with recompute or graphs is compared
// with a run of `runs` with its sharding and neither (the reference): per
// rank, step and microbatch, the sites observed in eager/record phase come in the
// reference's order (restricted to the sites the graphs leave observable), and
// without recompute with the reference's grad mode (a checkpointed forward is
// observed under no-grad, so grad modes differ by design with recompute).
// What observers receive: a residual_contribution never requires grad and
// never shares storage with the accumulator observed just before it
// (contract.md section 1: computed without autograd into a fresh tensor).
PropertyResult check_exactly_once(const std::vector<const CheckRun*>& runs);
// SKIPs without recompute, and under full-iteration graphs with graph warmup 0
// (every step is captured or replayed, both bypass checkpoints: nothing recomputes).
PropertyResult check_recompute_invariance(const CheckRun& a, const CheckRun& c);
// Every metric of each run in `sharded` against `single` (the single-rank run); rows receives
// every comparison. SKIPs when no metric value was compared.
PropertyResult check_sharded_reduction(const CheckRun& single,
                                       const std::vector<const CheckRun*>& sharded,
                                       std::vector<MetricComparison>* rows);
// `c` is the eager reference with the same recompute as `a` (graphs off,
// recompute kept). SKIPs without graphs and without a step after the capture
// (per-layer: steps < 2; full-iteration: steps <= graph-warmup + 1).
PropertyResult check_graph_replay(const CheckRun& a, const CheckRun& c);
// `alias_failure`: a rank failure that reported prepared metric state aliasing
// an observed tensor, in run `run` (graph_replay's FAIL; no other property is
// evaluated then).
PropertyResult graph_replay_alias_failure(const std::string& run, const std::string& alias_failure);
// `side` (a run on another backend) against `reference` (the same scenario on the
// reference backend): steps, losses, gradient norms and metrics within the
// dtype's backend tolerance; the observation sequence identical; observed values
// (trace sums and sums of squares) within the tolerance in the phases that hold
// values. SKIPs when nothing was compared.
PropertyResult check_backend_parity(const CheckRun& side, const CheckRun& reference);
PropertyResult check_determinism(const CheckRun& a, const CheckRun& again);
// MoE: `h` is `a` without forced routing and with the padding tokens' ids
// shifted (variant::router_inputs_changed); the router sites those cannot
// reach are bitwise equal in step 0. SKIPs without MoE layers, and without
// forcing and padding (no `h`).
PropertyResult check_router_invariance(const CheckRun& a, const CheckRun* h);
// collective_symmetry's FAIL when run `run` stopped on a collective fingerprint
// mismatch (--check-collectives), the only property then evaluated.
PropertyResult collective_symmetry_mismatch_failure(const std::string& run,
                                                    const std::string& mismatch);
// SKIPs when no group of any run has more than one member.
PropertyResult check_collective_symmetry(const std::vector<const CheckRun*>& runs);

// Every run's gradients after finalize_grads: each parameter's copies that
// must be replicas (the same TP shard, or a TP-replicated parameter, on every
// rank that holds it: across TP, CP, DP and the expert-data-parallel ranks)
// have identical digests at every step. SKIPs when no parameter has two copies.
PropertyResult check_replica_consistency(const std::vector<const CheckRun*>& runs);

// `sharded` (the scenario's runs) against `single` (the single-rank run): each step's loss and
// each parameter's whole-gradient L2 norm (its pieces' norms combined: one copy
// per TP shard, a replica once) within the metric tolerance. SKIPs without a
// sharded run.
PropertyResult check_sharded_gradients(const CheckRun& single,
                                       const std::vector<const CheckRun*>& sharded);

// `resumed` (a resume launch whose saved_by is the launch that saved its
// checkpoint) against the uninterrupted `reference`: every step's loss,
// evaluation loss, whole-gradient norms and metrics, and each parameter's
// final L2 norm and random projection (over its TP pieces) within the metric
// tolerance; the resume launch must start at the saving launch's last step.
PropertyResult check_resume_invariance(const CheckRun& resumed, const CheckRun& reference);

}  // namespace parity::checks
