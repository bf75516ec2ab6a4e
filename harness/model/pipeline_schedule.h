#pragma once
// What each pipeline stage runs, in order, under Megatron Core 0.16.1's
// schedules: forward_backward_no_pipelining (pp 1),
// forward_backward_pipelining_without_interleaving (1F1B: warmup, steady,
// cooldown; vpp 1) and forward_backward_pipelining_with_interleaving (vpp > 1:
// get_schedule_table, get_pp_rank_microbatches and its recv bookkeeping), with
// every P2PCommunicator call those functions make, in Megatron's defaults
// (batch_p2p_comm, no overlap_p2p_comm), training or forward_only (the
// evaluation's forward passes). Pure: no backend, no tensors.
//
// A stage's schedule is a list of steps: a compute step (forward or backward
// of one microbatch on one model chunk) or a communicate step (one
// P2PCommunicator call = one batch_isend_irecv, whose ops Megatron posts in
// the order send_prev, recv_prev, send_next, recv_next; empty where the stage
// has nothing to move, e.g. send_forward on the last stage). Peers are pp
// ranks on a ring: next = (rank + 1) % pp, prev = (rank - 1) % pp, so under
// vpp the last stage's chunk c feeds the first stage's chunk c + 1.
#include <optional>
#include <string>
#include <vector>

#include "harness/model/pipeline_layout.h"

namespace parity {

struct PipelineScheduleConfig {
  int pp = 1;            // pipeline stages ("pp")
  int vpp = 1;           // model chunks per stage ("vpp"); 1 = Megatron's None, no interleaving
  int microbatches = 1;  // "microbatches"
  // Megatron's microbatch_group_size_per_vp_stage ("microbatch-group"): how many
  // microbatches run on one chunk before the next; nullopt = pp, Megatron's
  // default (depth-first). Read only when vpp > 1.
  std::optional<int> microbatch_group;
  // Megatron's forward_only (evaluation): every forward, no backward, and only
  // the activation messages.
  bool forward_only = false;
};

// Empty when Megatron runs the schedule: microbatches >= 1; vpp > 1 needs
// pp > 1 (the no-pipelining schedule takes one chunk); with vpp > 1 the group
// lies in [pp, microbatches] and the last group (microbatches % group) is
// empty or at least pp. Else the first broken rule, as pipeline_layout.h's
// violations (the option's key, its value, the rule).
std::vector<PipelineLayoutViolation> validate_pipeline_schedule(
    const PipelineScheduleConfig& config);

enum class PipelineScheduleKind { no_pipelining, one_f_one_b, interleaved };
// Megatron's get_forward_backward_func.
PipelineScheduleKind pipeline_schedule_kind(const PipelineScheduleConfig& config);

struct ChunkMicrobatch {
  int microbatch = 0, chunk = 0;
  bool operator==(const ChunkMicrobatch& o) const {
    return microbatch == o.microbatch && chunk == o.chunk;
  }
};
// get_schedule_table(microbatches, vpp, group): the forward order of
// (microbatch, chunk) on every stage; the backward order is the same table
// with chunk -> vpp - 1 - chunk. vpp 1 gives microbatches 0..M-1 on chunk 0.
std::vector<ChunkMicrobatch> pipeline_schedule_table(int microbatches, int vpp, int group);
// get_pp_rank_microbatches: the forwards a stage runs before its first
// backward (1F1B: pp - rank - 1; interleaved: 2 (pp - rank - 1) + (vpp - 1)
// group; pp 1: 0; forward_only: all), at most every forward.
int pipeline_warmup_forwards(const PipelineScheduleConfig& config, int pp_rank);

enum class PipelinePass { forward, backward };
enum class P2PTensor { activation, gradient };
enum class P2PDirection { send, recv };

// The P2PCommunicator methods the schedules call (Megatron's names).
enum class P2PCall {
  recv_forward,
  send_forward,
  recv_backward,
  send_backward,
  send_forward_recv_backward,
  send_backward_recv_forward,
  send_forward_recv_forward,
  send_backward_recv_backward,
  send_forward_backward_recv_forward_backward,
};
const char* p2p_call_name(P2PCall call);

// One isend / irecv. Activations go to the next stage (send_next / recv_prev),
// gradients to the previous (send_prev / recv_next). (microbatch, chunk) is
// this stage's own: the forward that produced the activation or will consume
// it, the backward that produced the gradient or will consume it.
struct P2POp {
  P2PDirection direction = P2PDirection::send;
  P2PTensor tensor = P2PTensor::activation;
  int peer = 0;  // pp rank
  int microbatch = 0, chunk = 0;
  bool operator==(const P2POp& o) const {
    return direction == o.direction && tensor == o.tensor && peer == o.peer &&
           microbatch == o.microbatch && chunk == o.chunk;
  }
};

struct ScheduleStep {
  enum class Kind { compute, communicate };
  Kind kind = Kind::compute;
  // compute
  PipelinePass pass = PipelinePass::forward;
  int microbatch = 0, chunk = 0;
  // communicate: one batch, completed as a whole
  P2PCall call = P2PCall::recv_forward;
  std::vector<P2POp> ops;
};

// Stage `pp_rank`'s steps. Throws std::invalid_argument when the
// configuration has violations or the rank is out of range.
std::vector<ScheduleStep> pipeline_schedule(const PipelineScheduleConfig& config, int pp_rank);
// Every stage's, index = pp rank.
std::vector<std::vector<ScheduleStep>> pipeline_schedules(const PipelineScheduleConfig& config);

// "forward mb 2 chunk 1", "send activation mb 2 chunk 1 to stage 3",
// "send_forward_recv_backward [send activation mb 1 chunk 0 to stage 1; recv
// gradient mb 0 chunk 0 from stage 1]", "send_forward []".
std::string describe(const P2POp& op);
std::string describe(const ScheduleStep& step);

// A stage that sends activations out of schedule order (the pp-send-order
// fault): the payloads of its first two activation sends trade places, so
// each lands where the peer expects the other. False when the stage sends
// fewer than two activations.
bool swap_first_activation_sends(std::vector<ScheduleStep>& steps);

}  // namespace parity
