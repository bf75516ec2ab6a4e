#pragma once
// One training step's microbatches on a pipeline stage (pp > 1): the stage's
// schedule (harness/model/pipeline_schedule.h: Megatron's 1F1B or interleaved
// 1F1B) run step by step, each compute step a forward or backward of one
// microbatch on one model chunk, each communicate step one batch of
// point-to-point sends and receives with the neighbouring stages
// (Communicator::exchange). See docs/model.md "Pipeline schedules".
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "harness/model/pipeline_schedule.h"

namespace parity {

class GPTModel;
struct MtpBatch;  // harness/model/multi_token_prediction.h

struct PipelineStepInputs {
  std::int64_t step = 0;
  // This stage's inputs per local microbatch: the tokens (read by the chunk
  // that embeds) and labels (read by the chunk with the loss), this CP rank's part.
  std::vector<at::Tensor> tokens, labels;
  at::Tensor positions;
  // What each microbatch's token losses are divided by (the global batch's tokens).
  double batch_tokens = 1;
  // The evaluation's forwards (a forward_only schedule, under no grad): no
  // backward, and messages numbered apart from the training step's.
  bool evaluation = false;
  // Per local microbatch, the MTP depths' inputs (read by the chunk with the
  // loss, which runs the depths); null without MTP.
  const std::vector<MtpBatch>* mtp = nullptr;
};

// Per local microbatch, in microbatch order, on the stage holding the loss
// (empty elsewhere): logits, loss (this rank's share of the step's mean) and
// per-token losses, detached.
struct PipelineStepOutputs {
  std::vector<at::Tensor> logits, loss, token_losses;
};

// The schedule for `model`'s pipeline (its stage count and chunks) over
// `microbatches`, validated (throws std::invalid_argument naming the rule);
// `forward_only`: the evaluation's.
std::vector<ScheduleStep> stage_schedule(const GPTModel& model, std::int64_t microbatches,
                                         bool forward_only = false);

// Runs `schedule` (this stage's) for one step: gradients accumulate in the
// parameters as in the non-pipelined loop; nothing is reduced here.
PipelineStepOutputs run_pipeline_microbatches(GPTModel& model, const PipelineStepInputs& inputs,
                                              const std::vector<ScheduleStep>& schedule);

// The message id both sides of one pipeline message agree on: step, training
// or evaluation, microbatch, the producing virtual stage (chunk * pp + stage)
// and activation or gradient. Compared under --check-collectives.
std::int64_t pipeline_message_id(std::int64_t step, bool evaluation, std::int64_t microbatches,
                                 int virtual_stages, int microbatch, int producer,
                                 P2PTensor tensor);

}  // namespace parity
