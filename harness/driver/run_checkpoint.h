#pragma once
// The rank program's checkpoints (docs/weights.md "Saving and resuming"):
// --resume builds the model from a checkpoint and restores the rest of the
// training state; --save-checkpoint saves after the last step and every
// --save-every steps.
#include <cstdint>
#include <memory>

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

}  // namespace parity
