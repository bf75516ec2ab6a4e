#include "harness/metrics/collector.h"

#include <cctype>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/stage_exchange.h"

PARITY_USES_FAULT(sp_residual_mislabel);

namespace parity {

std::string_view failure_tag(MetricFailure kind) {
  switch (kind) {
    case MetricFailure::prepared_state_aliases_observation:
      return "[prepared-state-aliases-observation]";
  }
  return "[metric-failure]";
}

MetricFailureError::MetricFailureError(MetricFailure kind, const std::string& what)
    : std::logic_error(std::string(failure_tag(kind)) + " " + what), kind_(kind) {}

bool counts_for_step(const ExecutionPoint& point) {
  if (point.step < 0) return false;
  switch (point.phase) {
    case GraphPhase::eager:
    case GraphPhase::record:
    case GraphPhase::replay:
      return true;
    case GraphPhase::warmup:
    case GraphPhase::capture:
      return false;
  }
  return false;
}

std::string layer_label(const std::string& site_name) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t dot = site_name.find('.', begin);
    parts.push_back(site_name.substr(begin, dot - begin));
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  auto is_index = [](const std::string& s) {
    if (s.empty()) return false;
    for (char c : s)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
  };
  std::size_t end = 0;  // parts [0, end) form the label
  for (std::size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i] == "layers" && is_index(parts[i + 1])) end = i + 2;
  std::string label;
  for (std::size_t i = 0; i < end; ++i) label += (i ? "." : "") + parts[i];
  return label;
}

MetricCollector::MetricCollector(std::vector<std::shared_ptr<const Metric>> metrics,
                                 const ParallelTopology& topology, int rank, const Backend* backend)
    : metrics_(std::move(metrics)),
      backend_(backend),
      topology_(topology),
      coordinates_(topology.coordinates(rank)),
      prepared_(metrics_.size()) {}

KindSet MetricCollector::kinds() const {
  KindSet k;
  for (const auto& m : metrics_) k = KindSet::from_bits(k.bits() | m->kinds().bits());
  return k;
}

TensorObservationCallback MetricCollector::callback() {
  return [this](const ObservationOwner& owner, std::string_view name, SourceKind kind,
                const at::Tensor& tensor, OptionalDim tp, OptionalDim seq, OptionalDim batch) {
    observe(owner, name, kind, tensor, tp, seq, batch, current_execution_point());
  };
}

void MetricCollector::observe(const ObservationOwner& owner, std::string_view name, SourceKind kind,
                              const at::Tensor& tensor, OptionalDim tp_shard_dim,
                              OptionalDim sequence_dim, OptionalDim batch_dim,
                              const ExecutionPoint& point) {
  if (!counts_for_step(point)) {
    ++ignored_;
    return;
  }
  // Fault sp-residual-mislabel: SP residuals labelled Replica on tp (the
  // config-less owner rule, megatron-reference 7.9).
  if (fault_active(fault_sp_residual_mislabel) &&
      (kind == SourceKind::residual_accumulator || kind == SourceKind::residual_contribution))
    tp_shard_dim = std::nullopt;
  const AxisPlacements placements =
      placements_for_forward_observation(tp_shard_dim, sequence_dim, batch_dim, tensor.dim(),
                                         topology_.tp(), topology_.cp(), topology_.dp());
  const MetricSite site{owner.canonical_name(), std::string(name), kind};
  observe_placed(site, valid_tokens_of(site, tensor, tp_shard_dim, sequence_dim, batch_dim),
                 placements, batch_dim, point);
}

void MetricCollector::set_valid_tokens(const at::Tensor& local,
                                       const at::Tensor& sequence_parallel_shard) {
  valid_rows_ = local.defined() ? local.nonzero().squeeze(1) : at::Tensor();
  expected_rows_ = local.defined() ? local.size(0) : 0;
  expected_shard_rows_ = sequence_parallel_shard.defined() ? sequence_parallel_shard.size(0) : 0;
  valid_shard_rows_ = sequence_parallel_shard.defined()
                          ? sequence_parallel_shard.nonzero().squeeze(1)
                          : at::Tensor();
}

at::Tensor MetricCollector::valid_tokens_of(const MetricSite& site, const at::Tensor& tensor,
                                            OptionalDim tp_shard_dim, OptionalDim sequence_dim,
                                            OptionalDim batch_dim) const {
  if (!valid_rows_.defined() || !sequence_dim || !batch_dim || !tensor.defined()) return tensor;
  // The router leaves padding out of its sites itself (Megatron's padding mask
  // compacts them): what it observes is what counts, as in Megatron.
  if (site.kind == SourceKind::router_logits || site.kind == SourceKind::router_scores)
    return tensor;
  const std::int64_t rank = tensor.dim();
  const auto normal = [rank](std::int64_t d) { return d < 0 ? d + rank : d; };
  const std::int64_t dim = normal(*sequence_dim);
  if (dim == normal(*batch_dim)) return tensor;  // sequence and batch on one dim: compacted
  const bool shard = tp_shard_dim && normal(*tp_shard_dim) == dim && valid_shard_rows_.defined();
  const at::Tensor& rows = shard ? valid_shard_rows_ : valid_rows_;
  const std::int64_t expected = shard ? expected_shard_rows_ : expected_rows_;
  PARITY_CHECK_INTERNAL(tensor.size(dim) == expected,
                        "metrics: site " + site.full_name() + " has " +
                            std::to_string(tensor.size(dim)) + " rows on its sequence dim, the " +
                            "packed sequence's token mask " + std::to_string(expected));
  at::NoGradGuard no_grad;
  return tensor.detach().index_select(dim, rows.to(tensor.device()));
}

void MetricCollector::observe_placed(const MetricSite& site, const at::Tensor& tensor,
                                     const AxisPlacements& placements, OptionalDim batch_dim,
                                     const ExecutionPoint& point) {
  if (!counts_for_step(point)) {
    ++ignored_;
    return;
  }
  if (step_ && *step_ != point.step)
    PARITY_FAIL_INTERNAL("metrics: an observation of step " + std::to_string(point.step) +
                         " arrived before step " + std::to_string(*step_) +
                         " was committed (site " + site.full_name() + ")");
  step_ = point.step;
  placements.validate();
  MetricInput input{site, tensor, placements, is_placeholder(placements, coordinates_), batch_dim};
  if (batch_dim && tensor.dim() > 0)
    input.batch_dim = *batch_dim < 0 ? *batch_dim + tensor.dim() : *batch_dim;
  at::NoGradGuard no_grad;
  std::optional<ObservationReductions> reductions;
  if (backend_ && tensor.defined())
    input.reductions = &reductions.emplace(*backend_, tensor.detach());
  bool any = false;
  for (std::size_t m = 0; m < metrics_.size(); ++m) {
    if (!metrics_[m]->accepts(site.kind)) continue;
    Prepared p = metrics_[m]->prepare(input);
    if (tensor.defined() && p.value.defined() && tensor.has_storage() && p.value.has_storage() &&
        p.value.storage().is_alias_of(tensor.storage()))
      throw MetricFailureError(MetricFailure::prepared_state_aliases_observation,
                               "metric " + metrics_[m]->name() + ": prepared state of site " +
                                   site.full_name() + " shares storage with the observed tensor");
    auto [it, inserted] = prepared_[m].try_emplace(site.full_name());
    if (inserted) it->second.site = site;
    it->second.microbatches.push_back(std::move(p));
    any = true;
  }
  if (any) ++counted_;
}

void MetricCollector::share_across_stages(Communicator& pp) {
  std::vector<PreparedEntry> mine;
  for (std::size_t m = 0; m < prepared_.size(); ++m)
    for (auto& [name, values] : prepared_[m])
      mine.push_back({m, values.site, std::move(values.microbatches)});
  const at::Device device = backend_ ? backend_->device() : at::Device(at::kCPU);
  std::vector<PreparedEntry> every = gather_across_stages(pp, mine, device);
  for (auto& p : prepared_) p.clear();
  for (PreparedEntry& e : every) {
    PARITY_CHECK_INTERNAL(e.metric < prepared_.size(), "metrics: a stage sent values of metric #" +
                                                           std::to_string(e.metric) + " of " +
                                                           std::to_string(prepared_.size()));
    SiteValues& v = prepared_[e.metric][e.site.full_name()];
    v.site = e.site;
    for (Prepared& p : e.microbatches) v.microbatches.push_back(std::move(p));
  }
}

std::vector<MetricResult> MetricCollector::commit(MetricExecutor& executor) {
  if (topology_.pp() > 1) share_across_stages(executor.group(Axis::pp));
  std::vector<MetricProgram> programs;
  for (std::size_t m = 0; m < metrics_.size(); ++m) {
    const Metric& metric = *metrics_[m];
    std::map<std::string, std::vector<Prepared>> labels;
    for (auto& [name, values] : prepared_[m]) {
      Prepared merged = metric.merge(std::move(values.microbatches));
      merged.layer = layer_label(name);
      switch (metric.scope()) {
        case LabelScope::layer:
          if (!merged.layer.empty()) labels[merged.layer].push_back(merged);
          labels["global"].push_back(std::move(merged));
          break;
        case LabelScope::global:
          labels["global"].push_back(std::move(merged));
          break;
        // One program; its named results carry the labels (this one names it in errors).
        case LabelScope::layer_rollup:
          labels["every-layer"].push_back(std::move(merged));
          break;
      }
    }
    for (auto& [label, values] : labels)
      programs.push_back({metric.name(), label, metric.start(std::move(values))});
  }
  for (auto& p : prepared_) p.clear();
  step_.reset();
  return executor.run(std::move(programs));
}

}  // namespace parity
