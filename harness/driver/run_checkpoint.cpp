#include "harness/driver/run_checkpoint.h"

#include <ATen/ATen.h>

#include "harness/config/resume_layout.h"
#include "harness/faults/code_path_faults.h"

PARITY_USES_FAULT(resume_rng_not_restored);

namespace parity {

OptimizerSettings optimizer_settings(const RunConfig& config) {
  OptimizerSettings s;
  s.kind = config.optimizer;
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

std::string save_after_step(const RunConfig& config, std::int64_t step, GPTModel& model,
                            const Optimizer& optimizer, int rank, Communicator* world,
                            const std::function<void()>& after_write) {
  checkpoint::SaveRequest request;
  request.dir = config.save_checkpoint;
  request.step = step + 1;
  request.scenario = to_json(config);
  const std::int64_t per_step = static_cast<std::int64_t>(config.microbatches) * config.dp;
  request.data = {{"global_microbatches_per_step", per_step},
                  {"sequences_per_step", config.global_batch()},
                  {"next_global_microbatch", (step + 1) * per_step},
                  {"batch", config.load_batch.empty() ? "seeded" : config.load_batch}};
  request.rank = rank;
  request.world = world;
  request.after_write = after_write;
  return checkpoint::save(request, model, optimizer);
}

namespace {
constexpr std::uint64_t kProjectionSeed = 0x9a417e5e;
}  // namespace

nlohmann::json final_parameters(GPTModel& model) {
  at::NoGradGuard no_grad;
  const ParallelContext& par = model.parallel();
  nlohmann::json out = nlohmann::json::object();
  for (const Parameter& p : model.parameters()) {
    const at::Tensor local = p.value.detach().to(at::kCPU, at::kDouble);
    const checkpoint::ShardGroup g = checkpoint::shard_group_of(p, par);
    const at::Tensor w =
        shard_of(full_parameter(kProjectionSeed, p.name, checkpoint::full_shape_of(p, g.size),
                                InitKind::normal, 1.0, at::kDouble),
                 p.shard, g.rank, g.size);
    out[p.name] = {local.norm().item<double>(), (local * w).sum().item<double>()};
  }
  return out;
}

bool save_due(const RunConfig& config, std::int64_t step) {
  if (config.save_checkpoint.empty()) return false;
  if (step + 1 == config.steps) return true;
  return config.save_every > 0 && (step + 1) % config.save_every == 0;
}

}  // namespace parity
