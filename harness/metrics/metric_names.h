#pragma once
// The names `--metrics` accepts, Megatron-style: `<scope>-<kind>-<statistic>`,
// e.g. `layer-residual-contribution-l2` (one result per layer plus "global") or
// `global-output-logits-l2` ("global" only). The full list is in docs/metrics.md
// and known_metric_names(); parse_metric_names rejects anything else.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "harness/metrics/metric.h"

namespace parity {

// Where a metric's values come from: observed tensors (the collector), or the
// parameters and their gradients as the optimizer sees them (the driver,
// harness/model/parameter_norms.h: global-wgrad-l2, global-param-l2,
// layer-param-l2), which no observation site provides.
enum class MetricSource : std::int8_t { observation, parameters };

struct MetricSpec {
  std::string name;
  SourceKind kind;  // observation metrics only
  LabelScope scope;
  std::string statistic;  // "l2", "max", "abs-max", ..., "entropy", "router-health", ...
  MetricSource source = MetricSource::observation;
};

// Every known metric, in documentation order.
const std::vector<MetricSpec>& known_metrics();
std::vector<std::string> known_metric_names();

// One line each, for `parity list metrics`: what the metric computes ("L2 norm
// of residual_contribution, per layer and global"), and what the model needs to
// observe what it reads (validate_run_config rejects a metric without it).
std::string metric_doc(const MetricSpec& spec);
std::string metric_needs(const MetricSpec& spec);
// What provides an observation site of `kind` that not every model has.
std::string source_kind_needs(SourceKind kind);

// Whether `name` is one of the optimizer's norms (MetricSource::parameters).
bool is_parameter_metric(std::string_view name);

// Parses a comma-separated list (spaces around names ignored). Throws
// std::invalid_argument with one line naming the offending entry and listing
// the known names when a name is unknown, repeated, or the list is empty.
std::vector<MetricSpec> parse_metric_names(std::string_view list);
std::vector<MetricSpec> parse_metric_names(const std::vector<std::string>& names);

// A metric instance for an observation spec (std::invalid_argument for a
// parameter metric); make_metrics skips the parameter metrics.
std::shared_ptr<const Metric> make_metric(const MetricSpec& spec);
std::vector<std::shared_ptr<const Metric>> make_metrics(const std::vector<MetricSpec>& specs);

}  // namespace parity
