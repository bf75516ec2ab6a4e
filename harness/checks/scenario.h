#pragma once
// parity check's scenarios: the embedded default (what `parity check` with no
// argument runs) and scenario files (a JSON object with RunConfig's keys).
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/run_config.h"

namespace parity::checks {

// Every residual and logit metric (layer-residual-accumulator-*,
// layer-residual-contribution-*, global-output-logits-*): what a check
// collects when the scenario names no metric.
std::vector<std::string> default_check_metrics();

// TP2 x CP2 x DP2 with SP, 2 layers, selective recompute of every module
// (core_attn, layernorm, mlp: full recompute cannot be combined with per-layer
// graphs, as in Megatron), per-layer graphs with 1 warmup run, every residual
// and logit metric, 8 thread ranks, 2 steps (step 1 is the replay step).
RunConfig default_check_scenario();

class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a scenario file may say besides the run options: `"about"` (free-form
// text for people: the pitfall it guards, where a saved failure came from, its
// reproduce string) and `"expect"` (property name -> "PASS" | "FAIL" | "SKIP":
// the outcome the file promises; parity check fails when it is not met).
struct ScenarioMeta {
  nlohmann::json about;                       // null when absent
  std::map<std::string, std::string> expect;  // "exactly_once" -> "PASS"
};

// The property names parity check evaluates (contract.md section 5, in report
// order): what "expect" may name.
const std::vector<std::string>& check_property_names();

// Reads and parses a scenario file; throws ScenarioError with one line naming
// the file and the reason ("cannot read: No such file or directory", "JSON
// parse error at byte 17: ...", "expected a JSON object", `"expect"."foo":
// unknown property (known: ...)`). Returns the run options only: "about" and
// "expect" are removed and, when `meta` is given, stored there.
nlohmann::json read_scenario_file(const std::string& path, ScenarioMeta* meta = nullptr);

// The JSON text of a scenario file (run options, then "about" and "expect" when
// given): what PARITY_SAVE_FAILURES and the regression files hold.
nlohmann::json scenario_file_json(const RunConfig& config, const ScenarioMeta& meta = {});

}  // namespace parity::checks
