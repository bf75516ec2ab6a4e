#pragma once
// parity check's output: the property table, the per-metric table and the
// JSON report (docs/report-schema.md).
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/checks/baseline.h"
#include "harness/checks/property.h"
#include "harness/config/run_config.h"

namespace parity::checks {

struct CheckReport {
  std::string scenario_source;  // "embedded default" or the file path
  RunConfig scenario;
  std::vector<std::pair<std::string, RunConfig>> runs;  // name -> config as run ("a", "b", ...)
  std::vector<std::pair<std::string, std::string>> run_titles;
  std::vector<double> run_seconds;
  std::vector<PropertyResult> properties;
  std::vector<MetricComparison> metrics;  // every comparison of sharded_reduction
  std::vector<std::string> notes;
  // The scenario file's "expect" and one line per expectation (check.h
  // compare_expectations); empty when the scenario names none.
  std::map<std::string, std::string> expect;
  std::vector<std::string> expectation_lines;
  // --baseline: the stored report's path and what differs from it (baseline.h);
  // the path is empty without --baseline.
  std::string baseline_path;
  std::vector<BaselineDifference> baseline_differences;
  int exit_code = 0;
  double wall_seconds = 0;
};

std::string format_property_table(const std::vector<PropertyResult>& properties);
// One row per (metric, label): the value of the last step of the first sharded
// run that has it, its reference, and the worst error over every step and run.
std::string format_metric_table(const std::vector<MetricComparison>& rows);
nlohmann::ordered_json report_json(const CheckReport& report);

inline constexpr int kReportSchemaVersion = 1;

}  // namespace parity::checks
