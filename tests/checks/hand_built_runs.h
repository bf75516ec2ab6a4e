#pragma once
// Hand-built check runs for the property evaluators' tests.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/checks/properties.h"

namespace parity::testing {

// One rank, eager, `steps` x `microbatches`, one layer: 5 sites.
inline checks::CheckRun eager_run(std::string name, int steps = 2, int microbatches = 1) {
  checks::CheckRun run;
  run.name = std::move(name);
  run.config.layers = 1;
  run.config.steps = steps;
  run.config.microbatches = microbatches;
  checks::RankRun r;
  const std::vector<std::pair<std::string, std::string>> sites = {
      {"decoder.layers.0.residual_accumulator", "residual_accumulator"},
      {"decoder.layers.0.residual_contribution", "residual_contribution"},
      {"decoder.layers.0.self_attention.attention_context", "attention_context"},
      {"decoder.layers.0.mlp.mlp_output", "mlp_output"},
      {"output_layer.output_logits", "output_logits"},
      // The layernorm probes last, so the indices the tests use stay put.
      {"decoder.layers.0.input_layernorm.layernorm_output", "layernorm_output"},
      {"decoder.layers.0.pre_mlp_layernorm.layernorm_output", "layernorm_output"}};
  for (int s = 0; s < steps; ++s) {
    checks::StepData d;
    d.loss = 1.5 - s;
    d.logits_digest = "0x1";
    d.grads["w"] = "0xa" + std::to_string(s);
    d.grad_norms["w"] = 2.0;
    d.metrics[{"layer-residual-accumulator-l2", "global"}] = 3.0 + s;
    r.steps.push_back(d);
    for (int m = 0; m < microbatches; ++m)
      for (const auto& [site, kind] : sites)
        r.trace.push_back({0, s, m, "eager", site, kind, "0x" + std::to_string(s * 10 + m)});
  }
  r.collectives["tp"] = {{0}, 3, "0xabc"};
  run.ranks.push_back(r);
  run.results = nlohmann::json::array({{{"rank", 0}}});
  return run;
}

}  // namespace parity::testing
