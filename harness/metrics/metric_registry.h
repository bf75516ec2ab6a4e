#pragma once
// Statistics register themselves beside their implementation: the spelling,
// the one-line doc, the metric names that offer it and the factory, in one
// PARITY_REGISTER_STATISTIC. known_metrics(), `parity list metrics`,
// parse_metric_names and make_metric all read the registry (metric_names.cpp).
// The files that register are an OBJECT library (harness/metrics/CMakeLists.txt),
// so every registration links.
#include <memory>
#include <string_view>
#include <vector>

#include "harness/metrics/metric_names.h"

namespace parity {

// One metric name offered for a statistic: "<scope>-<kind>-<statistic>"
// (layer-router-logits-l2) unless `name` says otherwise.
struct MetricOffer {
  SourceKind kind;
  LabelScope scope;
  std::string_view name = {};
};

struct StatisticRegistration {
  // Its place in known_metrics() (link order across files is the linker's).
  int order = 0;
  std::string_view statistic;  // "l2": the name's last part, MetricSpec::statistic
  std::string_view doc;        // "L2 norm": `parity list metrics`
  // Offered on every first-wave kind: the four per-layer kinds (per layer and
  // global) and the output logits (global).
  bool on_first_wave_kinds = false;
  std::vector<MetricOffer> offers;  // further names
  std::shared_ptr<const Metric> (*make)(const MetricSpec& spec) = nullptr;
};

// Adds `r` (throws std::logic_error on a statistic or order registered twice).
bool register_statistic(StatisticRegistration r);
// Every registration, by order.
const std::vector<StatisticRegistration>& registered_statistics();
// nullptr when unknown.
const StatisticRegistration* find_statistic(std::string_view statistic);

#define PARITY_STATISTIC_CONCAT_INNER(a, b) a##b
#define PARITY_STATISTIC_CONCAT(a, b) PARITY_STATISTIC_CONCAT_INNER(a, b)
// At namespace scope in the statistic's .cpp: PARITY_REGISTER_STATISTIC({...});
#define PARITY_REGISTER_STATISTIC(...)                                                      \
  [[maybe_unused]] static const bool PARITY_STATISTIC_CONCAT(parity_statistic_, __LINE__) = \
      ::parity::register_statistic(StatisticRegistration __VA_ARGS__)

}  // namespace parity
