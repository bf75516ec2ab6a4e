#pragma once
// The rank program's checkpoints (docs/weights.md "Saving and resuming"):
// --resume builds the model from a checkpoint and restores the rest of the
// training state; --save-checkpoint saves after the last step and every
// --save-every steps.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/config/run_config.h"
#include "harness/model/checkpoint.h"
#include "harness/model/optimizer.h"

namespace parity {

OptimizerSettings optimizer_settings(const RunConfig& config);

// What a resume restored.
struct Resumed {
  std::int64_t step = 0;      // the run's first step
  bool rng_restored = false;  // at the saving layout only
};
// After the model was built from `reader` (checkpoint::ParameterLoader): the
// routers' expert biases, the optimizer's state and, where the run has the
// saving run's layout (same_layout), this rank's RNG streams; at another
// layout the streams stay as seeded (Megatron's --no-load-rng). Fault
// resume-rng-not-restored: never restored.
Resumed resume_from(const checkpoint::Reader& reader, const RunConfig& config, GPTModel& model,
                    Optimizer& optimizer, int rank);

// Whether the run saves after step `step` (0-based): after the last step, and
// after every save_every-th.
bool save_due(const RunConfig& config, std::int64_t step);
// The save after step `step` into config.save_checkpoint (every rank calls
// it; `world` null for one rank): the run's options and data position in the
// manifest, `after_write` the rank's fault point. Returns the step folder.
std::string save_after_step(const RunConfig& config, std::int64_t step, GPTModel& model,
                            const Optimizer& optimizer, int rank, Communicator* world,
                            const std::function<void()>& after_write);

// Each parameter this rank holds after training: the L2 norm of its shard and
// the shard's dot product with a fixed random tensor of the full shape (sliced
// like the parameter), both in fp64, {name: [l2, projection]}. Summed over a
// parameter's TP pieces they are the full tensor's (squared norm,
// projection): what resume_invariance compares, elementwise-sensitively,
// across layouts.
nlohmann::json final_parameters(GPTModel& model);

}  // namespace parity
