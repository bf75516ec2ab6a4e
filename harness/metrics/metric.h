#pragma once
// The staged metric protocol (megatron-reference.md section 3.5):
//   accepts(kind)  which observations a metric wants
//   prepare(input) runs inside the observation callback: compacts the observed
//                  tensor into a small Prepared value that never shares storage
//                  with it (the tensor may be a static graph buffer)
//   merge(values)  the microbatches of one site, as one value over their
//                  concatenation along the batch dim (local, no communication)
//   start(values)  the collective program of one result (one label) over the
//                  merged values of its sites: a chain of MetricSteps, each a set
//                  of collective requests over named axes and a continuation;
//                  the last step carries the finalized value.
// The executor (executor.h) runs the requests of every program, batching
// identical ones. Metrics see observations and axes only, never the model.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "harness/backend/tensor_statistics.h"  // accumulation_dtype
#include "harness/metrics/observation_reductions.h"
#include "harness/metrics/placement.h"
#include "harness/observation/source_kind.h"
#include "harness/parallel/collective.h"

namespace parity {

// Where an observation comes from: owner's canonical name, the local name.
struct MetricSite {
  std::string owner;
  std::string name;
  SourceKind kind = SourceKind::residual_accumulator;
  std::string full_name() const { return owner.empty() ? name : owner + "." + name; }
};

// One observation as a metric sees it.
struct MetricInput {
  MetricSite site;
  at::Tensor tensor;  // as observed: may be a view, require grad, be a static buffer
  AxisPlacements placements;
  bool placeholder = false;  // an Owned axis names another rank: contribute the identity
  std::optional<std::int64_t> batch_dim;  // normalized; microbatches concatenate along it
  // The observation's reductions from the run's backend, shared by its
  // metrics; null when the collector has no backend (metrics then reduce the
  // tensor themselves).
  ObservationReductions* reductions = nullptr;
};

// The compacted observation. `value` is metric-specific (a contribution vector,
// per-row partial sums, ...) and owns its storage.
struct Prepared {
  at::Tensor value;
  MetricSite site;  // where it was observed (the sampled median keys its sample on it)
  AxisPlacements placements;
  bool placeholder = false;
  std::vector<std::int64_t> shape;  // the observed tensor's local shape
  std::optional<std::int64_t> batch_dim;
  double reduced_size = 0;  // staged metrics: local size of the reduced dim(s)
  // The site's layer label ("" when none), set by the collector on merged
  // values: a LabelScope::layer_rollup program groups its values by it.
  std::string layer;
};

enum class CollectiveKind : std::int8_t { all_reduce, all_gather };

struct CollectiveRequest {
  at::Tensor value;
  Axis axis = Axis::tp;
  CollectiveKind kind = CollectiveKind::all_reduce;
  ReduceOp op = ReduceOp::sum;  // all_reduce
  std::int64_t dim = 0;         // all_gather: concatenation dim of `value`
};

// One step of a metric's program: either done (`result` defined) or waiting
// for `requests`, whose completed values (in request order) go to `resume`.
// A done step holds the program's one value (a 0-dim `result`, reported under
// the program's label) or several named values (a 1-D `result` with one entry
// of `labels` per element, each reported under its own label).
struct MetricStep {
  std::vector<CollectiveRequest> requests;
  std::function<MetricStep(std::vector<at::Tensor>)> resume;
  at::Tensor result;
  std::vector<std::string> labels;  // named results only
  bool done() const { return result.defined(); }

  static MetricStep finished(at::Tensor value) {
    MetricStep s;
    s.result = std::move(value);
    return s;
  }
  static MetricStep finished_named(at::Tensor values, std::vector<std::string> labels) {
    MetricStep s;
    s.result = std::move(values);
    s.labels = std::move(labels);
    return s;
  }
  static MetricStep collect(std::vector<CollectiveRequest> requests,
                            std::function<MetricStep(std::vector<at::Tensor>)> resume) {
    MetricStep s;
    s.requests = std::move(requests);
    s.resume = std::move(resume);
    return s;
  }
};

// Which labels a metric reports:
//   layer         per layer (`decoder.layers.N`) plus `global` (every site's
//                 population), one program each
//   global        `global` only
//   layer_rollup  labels the metric forms itself from one program over every
//                 site (values grouped by Prepared::layer), finishing with named
//                 results: cross-layer rollups such as "worst-layer" need every
//                 layer's contribution side by side (the router metrics,
//                 router_metrics.h)
enum class LabelScope : std::int8_t { layer, global, layer_rollup };

class Metric {
 public:
  Metric(std::string name, KindSet kinds, LabelScope scope)
      : name_(std::move(name)), kinds_(kinds), scope_(scope) {}
  virtual ~Metric() = default;

  const std::string& name() const { return name_; }
  KindSet kinds() const { return kinds_; }
  LabelScope scope() const { return scope_; }
  bool accepts(SourceKind kind) const { return kinds_.contains(kind); }

  virtual Prepared prepare(const MetricInput& input) const = 0;
  virtual Prepared merge(std::vector<Prepared> microbatches) const = 0;
  virtual MetricStep start(std::vector<Prepared> values) const = 0;

 private:
  std::string name_;
  KindSet kinds_;
  LabelScope scope_;
};

struct MetricResult {
  std::string metric;
  std::string label;  // "decoder.layers.3", "global", or a named result's label
  double value = 0;
};

}  // namespace parity
