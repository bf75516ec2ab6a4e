#pragma once
// parity check's scenarios: the embedded default (what `parity check` with no
// argument runs) and scenario files (a JSON object with RunConfig's keys).
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

// Reads and parses a scenario file; throws ScenarioError with one line naming
// the file and the reason ("cannot read: No such file or directory", "JSON
// parse error at byte 17: ...", "expected a JSON object").
nlohmann::json read_scenario_file(const std::string& path);

}  // namespace parity::checks
