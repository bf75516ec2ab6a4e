#include "harness/driver/run_checkpoint.h"

#include "harness/config/resume_layout.h"
#include "harness/faults/code_path_faults.h"

PARITY_USES_FAULT(resume_rng_not_restored);

namespace parity {

OptimizerSettings optimizer_settings(const RunConfig& config) {
  OptimizerSettings s;
  s.kind = config.optimizer == OptimizerOption::adam ? OptimizerKind::adam : OptimizerKind::sgd;
  s.lr = config.lr;
  s.beta1 = config.adam_beta1;
  s.beta2 = config.adam_beta2;
  s.eps = config.adam_eps;
  s.distributed = config.distributed_optimizer;
  return s;
}

Resumed resume_from(const checkpoint::Reader& reader, const RunConfig& config, GPTModel& model,
                    Optimizer& optimizer, int rank) {
  Resumed out;
  out.step = reader.step();
  checkpoint::restore_buffers(reader, model);
  checkpoint::restore_optimizer(reader, optimizer, model);
  const RunConfig saved = run_config_from_json(reader.scenario());
  if (same_layout(saved, config) && !fault_active(fault_resume_rng_not_restored)) {
    if (const std::optional<RngSnapshot> rng = reader.rng(rank)) {
      model.rng_tracker().restore(*rng);
      out.rng_restored = true;
    }
  }
  return out;
}

bool save_due(const RunConfig& config, std::int64_t step) {
  if (config.save_checkpoint.empty()) return false;
  if (step + 1 == config.steps) return true;
  return config.save_every > 0 && (step + 1) % config.save_every == 0;
}

}  // namespace parity
