#pragma once
// Plays every pipeline stage's schedule (pipeline_schedule.h) against the
// others, as batched point-to-point transports run them, and says whether the
// step completes: no deadlock, every send met by the recv it was meant for.
//
// Semantics: a stage runs its steps in order; compute steps pass at once; a
// communicate step posts all its ops together (batch_isend_irecv) and the
// stage waits until every one of them completed. An op completes when its
// partner is posted too (rendezvous: a send does not complete into a buffer,
// the strictest transport, so a schedule that completes here completes on a
// buffering one as well). Partners pair in posting order on each channel: the
// k-th send from stage a to stage b meets b's k-th recv from a. A channel is
// (a, b) under tagless matching (NCCL's, and Gloo's with one tag, as
// Megatron's batch_isend_irecv uses them) or (a, b, tensor kind) when the
// transport tags activations and gradients apart. A pair must carry the same
// tensor: same kind, same microbatch, and the receiver's chunk one virtual
// stage after the sender's for an activation (one before for a gradient;
// virtual stage = chunk * pp + rank).
#include <cstddef>
#include <string>
#include <vector>

#include "harness/model/pipeline_schedule.h"

namespace parity {

enum class P2PMatching { tagless, by_tensor_kind };

struct PipelineSimulation {
  enum class Outcome {
    completed,
    mismatched_pair,  // a send met a recv that expected another tensor
    unmatched,        // an op whose channel has no partner at its position
    deadlock,         // every unfinished stage waits on a stage that waits too
  };
  Outcome outcome = Outcome::completed;
  // One line naming both stages, their calls (step index) and ops; empty when completed.
  std::string message;
  std::vector<std::size_t> steps_done;  // per stage: the steps it finished
};

// `stages[p]` is pp rank p's schedule; pp = stages.size().
PipelineSimulation simulate_pipeline(const std::vector<std::vector<ScheduleStep>>& stages,
                                     P2PMatching matching);

const char* outcome_name(PipelineSimulation::Outcome outcome);

}  // namespace parity
