#include "harness/metrics/metric_names.h"

#include <set>
#include <stdexcept>

#include "harness/base/nearest_names.h"
#include "harness/metrics/dimwise_metrics.h"
#include "harness/metrics/logical_metrics.h"
#include "harness/metrics/router_metrics.h"
#include "harness/metrics/sampled_median.h"

namespace parity {

namespace {

// The statistics that make sense on any first-wave kind (none of them is a
// distribution, so normalized entropy is offered on router scores only).
constexpr const char* kStatistics[] = {"l2",        "max",       "abs-max",     "min",
                                       "mean",      "rms",       "nan-count",   "inf-count",
                                       "mean-row-l2", "mean-column-l2"};

std::string hyphenated(SourceKind kind) {
  std::string s(to_string(kind));
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

std::vector<MetricSpec> build() {
  std::vector<MetricSpec> specs;
  // First wave: every statistic on every kind. Layer-owned kinds report per
  // layer plus global; the logits report global only.
  const SourceKind layer_kinds[] = {SourceKind::residual_accumulator,
                                    SourceKind::residual_contribution,
                                    SourceKind::attention_context, SourceKind::mlp_output};
  for (SourceKind kind : layer_kinds)
    for (const char* s : kStatistics)
      specs.push_back({"layer-" + hyphenated(kind) + "-" + s, kind, LabelScope::layer,
                       s});
  for (const char* s : kStatistics)
    specs.push_back({"global-output-logits-" + std::string(s), SourceKind::output_logits,
                     LabelScope::global, s});
  // Later waves (Megatron's registered names; no site announces these kinds yet).
  specs.push_back({"global-mtp-logits-l2", SourceKind::mtp_logits, LabelScope::global, "l2"});
  specs.push_back({"layer-router-logits-l2", SourceKind::router_logits, LabelScope::layer, "l2"});
  specs.push_back({"layer-router-logits-max", SourceKind::router_logits, LabelScope::layer, "max"});
  specs.push_back({"layer-router-logits-sampled-median", SourceKind::router_logits,
                   LabelScope::layer, "sampled-median"});
  specs.push_back({"layer-router-decision-entropy", SourceKind::router_scores, LabelScope::layer,
                   "entropy"});
  for (const char* family : {"health", "seq-aux-decomposition", "routing-balance", "expert-bias"})
    specs.push_back({std::string("layer-router-") + family, SourceKind::router_diagnostics,
                     LabelScope::layer_rollup, std::string("router-") + family});
  // What the optimizer computes for clipping and logging (field bug
  // ROCm/TransformerEngine PR 715): no observation site, the driver computes them.
  const SourceKind none = SourceKind::residual_accumulator;  // unused for parameter metrics
  specs.push_back(
      {"global-wgrad-l2", none, LabelScope::global, "wgrad-l2", MetricSource::parameters});
  specs.push_back(
      {"global-param-l2", none, LabelScope::global, "param-l2", MetricSource::parameters});
  specs.push_back(
      {"layer-param-l2", none, LabelScope::layer, "param-l2", MetricSource::parameters});
  return specs;
}

std::string statistic_doc(const std::string& s) {
  static const std::pair<const char*, const char*> docs[] = {
      {"l2", "L2 norm"},
      {"max", "maximum"},
      {"abs-max", "largest absolute value"},
      {"min", "minimum"},
      {"mean", "mean"},
      {"rms", "root mean square"},
      {"nan-count", "number of NaN elements"},
      {"inf-count", "number of infinite elements"},
      {"mean-row-l2", "mean over rows of each row's L2 norm"},
      {"mean-column-l2", "mean over columns of each column's L2 norm"},
      {"sampled-median", "median of a deterministic sample"},
      {"entropy", "normalized entropy of the routing decision"},
      {"router-health", "router health bundle (rollups over the layers)"},
      {"router-seq-aux-decomposition", "per-sequence aux-loss decomposition"},
      {"router-routing-balance", "routing balance per sequence and over the batch"},
      {"router-expert-bias", "expert-bias statistics"},
      {"wgrad-l2",
       "L2 norm of every weight gradient after finalize_grads (what Megatron clips by)"},
      {"param-l2", "L2 norm of the parameters after the update"},
  };
  for (const auto& [name, doc] : docs)
    if (s == name) return doc;
  return s;
}

std::string known_list() {
  std::string s;
  for (const auto& spec : known_metrics()) s += (s.empty() ? "" : ", ") + spec.name;
  return s;
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

const std::vector<MetricSpec>& known_metrics() {
  static const std::vector<MetricSpec> specs = build();
  return specs;
}

std::string metric_doc(const MetricSpec& spec) {
  const std::string where = spec.scope == LabelScope::global         ? "global"
                            : spec.scope == LabelScope::layer_rollup ? "per layer, rolled up"
                                                                     : "per layer and global";
  if (spec.source == MetricSource::parameters)
    return statistic_doc(spec.statistic) + " (" +
           (spec.scope == LabelScope::global ? "the whole model" : "per decoder layer") + ")";
  return statistic_doc(spec.statistic) + " of " + std::string(to_string(spec.kind)) + ", " + where;
}

std::string source_kind_needs(SourceKind kind) {
  switch (kind) {
    case SourceKind::router_diagnostics:
      return "MoE layers (--moe-experts) whose router sees whole sequences: no sequence "
             "parallelism with tp > 1 and cp = 1 (diagnostics normalize within a sequence; "
             "megatron-reference 2.3)";
    case SourceKind::router_logits:
    case SourceKind::router_scores:
      return "MoE layers (--moe-experts 4, docs/model.md \"MoE layer\")";
    case SourceKind::mtp_logits:
      return "multi-token prediction layers (--mtp-layers 1)";
    case SourceKind::weight_gradient:
      return "weight-gradient sites (--observe-wgrad)";
    default:
      return "an observation site of that kind";
  }
}

std::string metric_needs(const MetricSpec& spec) {
  if (spec.source == MetricSource::parameters)
    return "nothing: the driver computes it from the parameters";
  switch (spec.kind) {
    case SourceKind::residual_accumulator:
    case SourceKind::residual_contribution:
    case SourceKind::attention_context:
      return "nothing: every layer observes " + std::string(to_string(spec.kind));
    case SourceKind::mlp_output:
      return "a dense layer (MoE layers observe the router instead)";
    case SourceKind::output_logits:
      return "nothing: every model observes output_logits";
    default:
      return source_kind_needs(spec.kind);
  }
}

bool is_parameter_metric(std::string_view name) {
  for (const MetricSpec& s : known_metrics())
    if (s.name == name) return s.source == MetricSource::parameters;
  return false;
}

std::vector<std::string> known_metric_names() {
  std::vector<std::string> names;
  for (const auto& s : known_metrics()) names.push_back(s.name);
  return names;
}

std::vector<MetricSpec> parse_metric_names(const std::vector<std::string>& names) {
  if (names.empty())
    throw std::invalid_argument("--metrics: no metric named; known metrics: " + known_list());
  std::vector<MetricSpec> out;
  std::set<std::string> seen;
  for (const auto& raw : names) {
    const std::string name = trim(raw);
    if (name.empty())
      throw std::invalid_argument("--metrics: empty metric name; known metrics: " + known_list());
    if (!seen.insert(name).second)
      throw std::invalid_argument("--metrics: metric '" + name + "' is named twice");
    const MetricSpec* found = nullptr;
    for (const auto& spec : known_metrics())
      if (spec.name == name) found = &spec;
    if (!found) {
      const std::string nearest = did_you_mean(name, known_metric_names(), "'");
      throw std::invalid_argument(
          "--metrics: unknown metric '" + name + "'" + (nearest.empty() ? "" : ": " + nearest) +
          " (parity list metrics lists the " + std::to_string(known_metrics().size()) + " known)");
    }
    out.push_back(*found);
  }
  return out;
}

std::vector<MetricSpec> parse_metric_names(std::string_view list) {
  std::vector<std::string> names;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = list.find(',', begin);
    names.emplace_back(list.substr(begin, comma - begin));
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  if (names.size() == 1 && trim(names[0]).empty()) names.clear();
  return parse_metric_names(names);
}

std::shared_ptr<const Metric> make_metric(const MetricSpec& spec) {
  if (spec.source == MetricSource::parameters)
    throw std::invalid_argument(spec.name + " is computed from the parameters, not observed");
  const KindSet kinds{spec.kind};
  const std::string& s = spec.statistic;
  auto logical = [&](LogicalStatistic st) -> std::shared_ptr<const Metric> {
    return make_logical_metric(st, spec.name, kinds, spec.scope);
  };
  auto dimwise = [&](DimwiseStatistic st) -> std::shared_ptr<const Metric> {
    return make_dimwise_metric(st, spec.name, kinds, spec.scope);
  };
  if (s == "l2") return logical(LogicalStatistic::l2);
  if (s == "max") return logical(LogicalStatistic::max);
  if (s == "abs-max") return logical(LogicalStatistic::abs_max);
  if (s == "min") return logical(LogicalStatistic::min);
  if (s == "mean") return logical(LogicalStatistic::mean);
  if (s == "rms") return logical(LogicalStatistic::rms);
  if (s == "nan-count") return logical(LogicalStatistic::nan_count);
  if (s == "inf-count") return logical(LogicalStatistic::inf_count);
  if (s == "mean-row-l2") return dimwise(DimwiseStatistic::mean_row_l2);
  if (s == "mean-column-l2") return dimwise(DimwiseStatistic::mean_column_l2);
  if (s == "entropy") return dimwise(DimwiseStatistic::entropy);
  if (s == "router-health") return make_router_metric(RouterMetricFamily::health, spec.name, kinds);
  if (s == "router-seq-aux-decomposition")
    return make_router_metric(RouterMetricFamily::seq_aux_decomposition, spec.name, kinds);
  if (s == "router-routing-balance")
    return make_router_metric(RouterMetricFamily::routing_balance, spec.name, kinds);
  if (s == "router-expert-bias")
    return make_router_metric(RouterMetricFamily::expert_bias, spec.name, kinds);
  if (s == "sampled-median") return make_sampled_median_metric(spec.name, kinds, spec.scope);
  throw std::invalid_argument("metric " + spec.name + ": unknown statistic '" + s + "'");
}

std::vector<std::shared_ptr<const Metric>> make_metrics(const std::vector<MetricSpec>& specs) {
  std::vector<std::shared_ptr<const Metric>> out;
  for (const auto& s : specs)
    if (s.source == MetricSource::observation) out.push_back(make_metric(s));
  return out;
}

}  // namespace parity
