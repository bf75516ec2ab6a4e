#include "harness/metrics/metric_names.h"

#include <set>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/base/nearest_names.h"
#include "harness/metrics/metric_registry.h"

namespace parity {

namespace {

std::string hyphenated(SourceKind kind) {
  std::string s(to_string(kind));
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

std::string scope_prefix(LabelScope scope) {
  return scope == LabelScope::global ? "global-" : "layer-";
}

// The optimizer's norms (field bug ROCm/TransformerEngine PR 715): no
// observation site and no factory, the driver computes them
// (harness/model/parameter_norms.h).
struct ParameterMetric {
  const char* name;
  LabelScope scope;
  const char* statistic;
  const char* doc;
};
constexpr ParameterMetric kParameterMetrics[] = {
    {"global-wgrad-l2", LabelScope::global, "wgrad-l2",
     "L2 norm of every weight gradient after finalize_grads (what Megatron clips by)"},
    {"global-param-l2", LabelScope::global, "param-l2",
     "L2 norm of the parameters after the update"},
    {"layer-param-l2", LabelScope::layer, "param-l2", "L2 norm of the parameters after the update"},
};

std::vector<MetricSpec> build() {
  std::vector<MetricSpec> specs;
  // The first-wave kinds: per layer plus global; the logits global only.
  const SourceKind layer_kinds[] = {SourceKind::residual_accumulator,
                                    SourceKind::residual_contribution,
                                    SourceKind::attention_context, SourceKind::mlp_output};
  const std::vector<StatisticRegistration>& statistics = registered_statistics();
  auto add = [&](SourceKind kind, LabelScope scope, const StatisticRegistration& r,
                 std::string_view name) {
    std::string n = name.empty()
                        ? scope_prefix(scope) + hyphenated(kind) + "-" + std::string(r.statistic)
                        : std::string(name);
    specs.push_back({std::move(n), kind, scope, std::string(r.statistic)});
  };
  for (SourceKind kind : layer_kinds)
    for (const StatisticRegistration& r : statistics)
      if (r.on_first_wave_kinds) add(kind, LabelScope::layer, r, {});
  for (const StatisticRegistration& r : statistics)
    if (r.on_first_wave_kinds) add(SourceKind::output_logits, LabelScope::global, r, {});
  for (const StatisticRegistration& r : statistics)
    for (const MetricOffer& o : r.offers) add(o.kind, o.scope, r, o.name);
  const SourceKind none = SourceKind::residual_accumulator;  // unused for parameter metrics
  for (const ParameterMetric& m : kParameterMetrics)
    specs.push_back({m.name, none, m.scope, m.statistic, MetricSource::parameters});
  return specs;
}

std::string statistic_doc(const std::string& s) {
  if (const StatisticRegistration* r = find_statistic(s)) return std::string(r->doc);
  for (const ParameterMetric& m : kParameterMetrics)
    if (s == m.statistic) return m.doc;
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
  if (names.empty()) PARITY_FAIL("--metrics: no metric named; known metrics: " + known_list());
  std::vector<MetricSpec> out;
  std::set<std::string> seen;
  for (const auto& raw : names) {
    const std::string name = trim(raw);
    if (name.empty()) PARITY_FAIL("--metrics: empty metric name; known metrics: " + known_list());
    PARITY_CHECK(seen.insert(name).second, "--metrics: metric '" + name + "' is named twice");
    const MetricSpec* found = nullptr;
    for (const auto& spec : known_metrics())
      if (spec.name == name) found = &spec;
    if (!found) {
      const std::string nearest = did_you_mean(name, known_metric_names(), "'");
      PARITY_FAIL("--metrics: unknown metric '" + name + "'" +
                  (nearest.empty() ? "" : ": " + nearest) + " (parity list metrics lists the " +
                  std::to_string(known_metrics().size()) + " known)");
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
  PARITY_CHECK(spec.source != MetricSource::parameters,
               spec.name + " is computed from the parameters, not observed");
  const StatisticRegistration* r = find_statistic(spec.statistic);
  if (!r || !r->make)
    PARITY_FAIL("metric " + spec.name + ": unknown statistic '" + spec.statistic + "'");
  return r->make(spec);
}

std::vector<std::shared_ptr<const Metric>> make_metrics(const std::vector<MetricSpec>& specs) {
  std::vector<std::shared_ptr<const Metric>> out;
  for (const auto& s : specs)
    if (s.source == MetricSource::observation) out.push_back(make_metric(s));
  return out;
}

}  // namespace parity
