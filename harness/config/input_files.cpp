#include "harness/config/input_files.h"

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/base/files.h"
#include "harness/config/model_mapping.h"
#include "harness/config/resume_layout.h"
#include "harness/config/run_config_fields.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/checkpoint.h"
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
      m.pipeline = PipelineLayoutConfig{};  // every stage's parameters, in one model
      const std::unique_ptr<Backend> backend = make_backend(config.backend);
      GPTModel model(m, *backend, ParallelContext::single(), &weights);
    } catch (const WeightsError& e) {
      // A few examples and a count: a wrong file must not print one line per tensor.
      constexpr std::size_t kShown = 3;
      const std::vector<std::string>& problems = e.problems();
      for (std::size_t i = 0; i < problems.size() && i < kShown; ++i)
        add("load-weights", config.load_weights, problems[i]);
      if (problems.size() > kShown)
        add("load-weights", config.load_weights,
            "and " + std::to_string(problems.size() - kShown) + " more problem(s) like these");
    } catch (const std::exception& e) {
      add("load-weights", config.load_weights, e.what());
    }
  }
  if (!config.resume.empty()) {
    // The code path the ranks take, with the run's code-path faults.
    const CodePathFaultScope faults(config.inject);
    try {
      const checkpoint::Reader reader(config.resume);
      const RunConfig saved = run_config_from_json(reader.scenario());
      for (const ResumeProblem& p : resume_problems(config, saved, reader.step()))
        out.push_back(
            {p.field, field_value_text(to_json(config)[p.field]),
             p.rule + " (--resume " + reader.folder() + ")",
             p.field == "optimizer" ? ConfigViolation::Kind::text : ConfigViolation::Kind::number});
      // Names and full shapes do not depend on the layout: one rank, plain.
      ModelConfig m = model_config_from(config);
      m.sequence_parallel = false;
      m.recompute = RecomputeKind::none;
      m.recompute_modules = {};
      m.graphs = GraphMode::none;
      m.pipeline = PipelineLayoutConfig{};
      const std::unique_ptr<Backend> backend = make_backend(config.backend);
      checkpoint::ParameterLoader parameters(reader);
      GPTModel model(m, *backend, ParallelContext::single(), &parameters);
      checkpoint::restore_buffers(reader, model);
    } catch (const std::exception& e) {
      add("resume", config.resume, e.what());
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

std::vector<ConfigViolation> check_output_files(const RunConfig& config) {
  std::vector<ConfigViolation> out;
  auto check = [&](const char* field, const std::string& path) {
    if (path.empty()) return;
    // A missing folder is validate_run_config's rule (the same exit 2, said once).
    const std::size_t slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0 && !files::is_directory(path.substr(0, slash)))
      return;
    const std::string why = files::why_not_writable(path);
    if (!why.empty())
      out.push_back({field, path, "cannot be written: " + why, ConfigViolation::Kind::text});
  };
  check("report", config.report);
  check("trace", config.trace);
  // --dump DIR is written as DIR.partial, then renamed over DIR: a file there is no folder.
  if (!config.dump.empty() && files::exists(config.dump) && !files::is_directory(config.dump))
    out.push_back({"dump", config.dump, "cannot be written: it is a file, not a folder",
                   ConfigViolation::Kind::text});
  else if (!config.dump.empty())
    check("dump", files::is_directory(config.dump) ? config.dump + ".new" : config.dump);
  // --save-checkpoint DIR: a folder of checkpoints (made when missing).
  if (!config.save_checkpoint.empty() && files::exists(config.save_checkpoint) &&
      !files::is_directory(config.save_checkpoint))
    out.push_back({"save-checkpoint", config.save_checkpoint,
                   "cannot be written: it is a file, not a folder", ConfigViolation::Kind::text});
  else if (!config.save_checkpoint.empty())
    check("save-checkpoint", files::is_directory(config.save_checkpoint)
                                 ? config.save_checkpoint + "/" + checkpoint::kTrackerFile
                                 : config.save_checkpoint);
  return out;
}

}  // namespace parity
