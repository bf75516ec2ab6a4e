#include "harness/config/input_files.h"

#include "harness/backend/registry.h"
#include "harness/config/model_mapping.h"
#include "harness/model/gpt_model.h"
#include "harness/model/loaded_batch.h"
#include "harness/model/loaded_weights.h"

namespace parity {

std::vector<ConfigViolation> check_input_files(const RunConfig& config) {
  std::vector<ConfigViolation> out;
  auto add = [&](const char* field, const std::string& value, const std::string& rule) {
    out.push_back({field, value, rule, ConfigViolation::Kind::text});
  };
  if (!config.load_weights.empty()) {
    try {
      LoadedWeights weights(config.load_weights);
      // Names and full shapes do not depend on the layout: one rank, plain.
      ModelConfig m = model_config_from(config);
      m.sequence_parallel = false;
      m.recompute = RecomputeKind::none;
      m.recompute_modules = {};
      m.graphs = GraphMode::none;
      const std::unique_ptr<Backend> backend = make_backend(config.backend);
      GPTModel model(m, *backend, ParallelContext::single(), &weights);
    } catch (const WeightsError& e) {
      for (const std::string& p : e.problems()) add("load-weights", config.load_weights, p);
    } catch (const std::exception& e) {
      add("load-weights", config.load_weights, e.what());
    }
  }
  if (!config.load_batch.empty()) {
    try {
      LoadedBatch batch(config.load_batch, config.global_batch(), config.seq, config.micro_batch,
                        config.vocab);
    } catch (const std::exception& e) {
      add("load-batch", config.load_batch, e.what());
    }
  }
  return out;
}

}  // namespace parity
