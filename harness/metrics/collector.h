#pragma once
// The metric side of an observation scope, per rank: receives the callback's
// seven fields, decides placements (placements_for_forward_observation), runs
// every accepting metric's prepare inside the callback, keeps the prepared
// values per site (microbatches accumulate), and at commit() builds one program
// per (metric, label) and runs them all through a MetricExecutor.
//
// Only step observations count: the execution point must have step >= 0 and
// phase eager, record or replay. Warmup and capture observations are ignored
// (counted in ignored()). callback() reads the calling thread's
// current_execution_point() (execution_point.h); observe() takes the point as an
// explicit argument. Observations of two different steps without a commit() in
// between are an error.
//
// Labels: a LabelScope::layer metric reports one result per layer label
// (the innermost `layers.<n>` prefix of the site name) plus "global" over all
// its sites; a LabelScope::global metric reports "global" only; a
// LabelScope::layer_rollup metric runs one program over all its sites (each
// merged value carries its layer label in Prepared::layer) and names its
// results itself.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/backend/backend.h"
#include "harness/base/error_kind.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/metric.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"
#include "harness/parallel/topology.h"

namespace parity {

// The failures the collector reports by kind (not by message): the runtime
// carries a KindedError's kind with the rank's failure (RankFailure::error_kind),
// and the message starts with the same tag for people.
enum class MetricFailure {
  // A metric's prepared state shares storage with the observed tensor (a
  // graph's static buffer would overwrite it: contract.md section 3).
  prepared_state_aliases_observation,
};
std::string_view failure_tag(MetricFailure kind);  // "[prepared-state-aliases-observation]"
class MetricFailureError : public std::logic_error, public KindedError {
 public:
  MetricFailureError(MetricFailure kind, const std::string& what);  // what: without the tag
  MetricFailure kind() const { return kind_; }
  std::string_view error_kind() const noexcept override { return failure_tag(kind_); }

 private:
  MetricFailure kind_;
};

// True when an observation at `point` belongs to a step's result.
bool counts_for_step(const ExecutionPoint& point);

// Megatron's greedy layer rule: the prefix through the innermost `layers.<n>`
// component, e.g. "decoder.layers.3.self_attention.attention_context" ->
// "decoder.layers.3"; "" when the name has none.
std::string layer_label(const std::string& site_name);

class MetricCollector {
 public:
  // `backend` (may be null; must outlive the collector): each observation's
  // reductions come from it in one read, shared by the metrics
  // (MetricInput::reductions). Null: each metric reduces alone.
  MetricCollector(std::vector<std::shared_ptr<const Metric>> metrics,
                  const ParallelTopology& topology, int rank, const Backend* backend = nullptr);

  // The union of the metrics' kinds (the capture scope's kind set).
  KindSet kinds() const;
  // A callback for capture_tensor_observations; reads current_execution_point().
  // The collector must outlive the scope.
  TensorObservationCallback callback();

  // A forward observation at an explicit execution point.
  void observe(const ObservationOwner& owner, std::string_view name, SourceKind kind,
               const at::Tensor& tensor, OptionalDim tp_shard_dim, OptionalDim sequence_dim,
               OptionalDim batch_dim, const ExecutionPoint& point);
  // An observation with explicit placements (parameter-style sources, tests).
  void observe_placed(const MetricSite& site, const at::Tensor& tensor,
                      const AxisPlacements& placements, OptionalDim batch_dim,
                      const ExecutionPoint& point);

  // Packed sequences: which rows of this rank's token sequence hold tokens
  // (bool [s_local]) and, under sequence parallelism, which rows of its TP
  // shard (bool [s_local / tp]; undefined without SP). An observation with a
  // sequence dim (apart from its batch dim) then counts those rows only: the
  // padding is in no metric's population. Undefined `local`: every row counts.
  void set_valid_tokens(const at::Tensor& local, const at::Tensor& sequence_parallel_shard);

  // Runs every program (collectives on `executor`'s groups); returns results
  // sorted by (metric, label) and clears the prepared state. With pipeline
  // stages, first exchanges the prepared values over the pp group
  // (stage_exchange.h), so every stage reports every label.
  std::vector<MetricResult> commit(MetricExecutor& executor);

  std::int64_t counted() const { return counted_; }  // observations prepared
  std::int64_t ignored() const { return ignored_; }  // warmup/capture/outside a step
  std::optional<std::int64_t> step() const { return step_; }

 private:
  struct SiteValues {
    MetricSite site;
    std::vector<Prepared> microbatches;
  };

  // Replaces prepared_ by every stage's prepared values (stage_exchange.h).
  void share_across_stages(Communicator& pp);

  std::vector<std::shared_ptr<const Metric>> metrics_;
  const Backend* backend_ = nullptr;
  ParallelTopology topology_;
  RankCoordinates coordinates_;
  std::vector<std::map<std::string, SiteValues>> prepared_;  // per metric, by site name
  // set_valid_tokens' rows as int64 indices (undefined: every row counts).
  at::Tensor valid_rows_, valid_shard_rows_;
  std::int64_t expected_rows_ = 0, expected_shard_rows_ = 0;  // the masks' lengths

  // `tensor` with only its valid token rows (set_valid_tokens), or itself.
  at::Tensor valid_tokens_of(const MetricSite& site, const at::Tensor& tensor,
                             OptionalDim tp_shard_dim, OptionalDim sequence_dim,
                             OptionalDim batch_dim) const;
  std::optional<std::int64_t> step_;
  std::int64_t counted_ = 0;
  std::int64_t ignored_ = 0;
};

}  // namespace parity
