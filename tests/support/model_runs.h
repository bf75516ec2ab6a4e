#pragma once
// parity run's model program launched in this process on thread ranks, for the
// tests that compare whole runs: the config is validated first, and a refused
// config or a failed run is a test failure naming it.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/launch_mapping.h"
#include "harness/driver/training_step.h"

namespace parity::testing {

// The launch's result; a failed run has failed the test too.
inline LaunchResult run_model(const RunConfig& c) {
  const std::vector<ConfigViolation> v = validate_run_config(c);
  EXPECT_TRUE(v.empty()) << (v.empty() ? "" : format_for_cli(v.front()));
  register_model_program();
  LaunchResult r = launch(c, kModelProgram);
  if (!r.ok()) ADD_FAILURE() << r.failure->lines().front();
  return r;
}

// The failure report's text; "" when the run succeeded (for tests that expect a failure).
inline std::string model_run_failure(const RunConfig& c) {
  const std::vector<ConfigViolation> v = validate_run_config(c);
  EXPECT_TRUE(v.empty()) << (v.empty() ? "" : format_for_cli(v.front()));
  register_model_program();
  const LaunchResult r = launch(c, kModelProgram);
  return r.ok() ? "" : r.failure->text();
}

// `c` on one rank: the same model, steps and global batch, without tp, cp, dp, ep or
// pipeline stages (what a sharded run is compared with).
inline RunConfig single_rank_run(RunConfig c) {
  c.microbatches *= c.dp;
  c.tp = c.cp = c.dp = c.ep = 1;
  c.etp = 0;  // follows tp
  c.sp = false;
  c.clear_pipeline();
  return c;
}

// "STEP METRIC LABEL" -> value, of every step of one rank's result.
inline std::map<std::string, double> step_metrics(const nlohmann::json& rank_result) {
  std::map<std::string, double> out;
  for (const auto& step : rank_result["steps"])
    for (const auto& m : step["metrics"])
      out[std::to_string(step["step"].get<int>()) + " " + m["metric"].get<std::string>() + " " +
          m["label"].get<std::string>()] = m["value"].get<double>();
  return out;
}

}  // namespace parity::testing
