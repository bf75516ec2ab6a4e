#include "harness/model/pipeline_schedule.h"
#include "harness/base/check.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace parity {
namespace {

const char* const kPp = "pp";
const char* const kVpp = "vpp";
const char* const kMicrobatches = "microbatches";
const char* const kGroup = "microbatch-group";

std::string str(int v) { return std::to_string(v); }

int group_of(const PipelineScheduleConfig& c) { return c.microbatch_group.value_or(c.pp); }

// One stage's schedule as it is built: the steps, and Megatron's per-chunk
// queues of received tensors reduced to their counts (input_tensors[chunk]
// and output_tensor_grads[chunk] are FIFOs: the n-th activation received for
// a chunk feeds its forward of microbatch n, the n-th gradient its backward of
// microbatch n).
class StageBuilder {
 public:
  StageBuilder(int pp, int rank, int vpp)
      : pp_(pp), rank_(rank), activations_(vpp, 0), gradients_(vpp, 0) {}

  bool first() const { return rank_ == 0; }
  bool last() const { return rank_ == pp_ - 1; }

  void compute(PipelinePass pass, int microbatch, int chunk) {
    ScheduleStep s;
    s.kind = ScheduleStep::Kind::compute;
    s.pass = pass;
    s.microbatch = microbatch;
    s.chunk = chunk;
    steps_.push_back(s);
  }

  // One P2PCommunicator call. `send_gradient` / `send_activation`: the
  // (microbatch, chunk) whose tensor goes out, nullopt for None; a received
  // tensor is named by the chunk whose queue it joins (nullopt: no recv).
  void communicate(P2PCall call, std::optional<ChunkMicrobatch> send_gradient,
                   std::optional<int> recv_activation_chunk,
                   std::optional<ChunkMicrobatch> send_activation,
                   std::optional<int> recv_gradient_chunk) {
    ScheduleStep s;
    s.kind = ScheduleStep::Kind::communicate;
    s.call = call;
    const int prev = (rank_ - 1 + pp_) % pp_, next = (rank_ + 1) % pp_;
    auto op = [](P2PDirection d, P2PTensor t, int peer, int microbatch, int chunk) {
      P2POp o;
      o.direction = d;
      o.tensor = t;
      o.peer = peer;
      o.microbatch = microbatch;
      o.chunk = chunk;
      return o;
    };
    // _batched_p2p_ops' order.
    if (send_gradient)
      s.ops.push_back(op(P2PDirection::send, P2PTensor::gradient, prev, send_gradient->microbatch,
                         send_gradient->chunk));
    if (recv_activation_chunk) {
      const int c = *recv_activation_chunk;
      s.ops.push_back(op(P2PDirection::recv, P2PTensor::activation, prev,
                         activations_[static_cast<std::size_t>(c)]++, c));
    }
    if (send_activation)
      s.ops.push_back(op(P2PDirection::send, P2PTensor::activation, next,
                         send_activation->microbatch, send_activation->chunk));
    if (recv_gradient_chunk) {
      const int c = *recv_gradient_chunk;
      s.ops.push_back(op(P2PDirection::recv, P2PTensor::gradient, next,
                         gradients_[static_cast<std::size_t>(c)]++, c));
    }
    steps_.push_back(std::move(s));
  }

  std::vector<ScheduleStep> take() { return std::move(steps_); }

 private:
  int pp_, rank_;
  std::vector<int> activations_, gradients_;
  std::vector<ScheduleStep> steps_;
};

template <typename T>
std::optional<T> when(bool condition, T value) {
  return condition ? std::optional<T>(value) : std::nullopt;
}

// forward_backward_no_pipelining: forward then backward, microbatch by microbatch.
std::vector<ScheduleStep> no_pipelining(int microbatches, bool forward_only) {
  StageBuilder b(1, 0, 1);
  for (int i = 0; i < microbatches; ++i) {
    b.compute(PipelinePass::forward, i, 0);
    if (!forward_only) b.compute(PipelinePass::backward, i, 0);
  }
  return b.take();
}

// forward_backward_pipelining_without_interleaving, forward_only: the same
// warmup, then each remaining forward sends on and receives the next.
std::vector<ScheduleStep> one_f_one_b_forward_only(int pp, int rank, int microbatches) {
  StageBuilder b(pp, rank, 1);
  const bool first = b.first(), last = b.last();
  const int warmup = std::min(pp - rank - 1, microbatches);
  const int remaining = microbatches - warmup;
  const std::optional<int> recv_activation = first ? std::nullopt : std::optional<int>(0);
  auto activation = [&](int microbatch) { return when(!last, ChunkMicrobatch{microbatch, 0}); };
  for (int i = 0; i < warmup; ++i) {
    b.communicate(P2PCall::recv_forward, std::nullopt, recv_activation, std::nullopt, std::nullopt);
    b.compute(PipelinePass::forward, i, 0);
    b.communicate(P2PCall::send_forward, std::nullopt, std::nullopt, activation(i), std::nullopt);
  }
  if (remaining > 0)
    b.communicate(P2PCall::recv_forward, std::nullopt, recv_activation, std::nullopt, std::nullopt);
  for (int i = 0; i < remaining; ++i) {
    b.compute(PipelinePass::forward, warmup + i, 0);
    b.communicate(P2PCall::send_forward, std::nullopt, std::nullopt, activation(warmup + i),
                  std::nullopt);
    if (i + 1 < remaining)
      b.communicate(P2PCall::recv_forward, std::nullopt, recv_activation, std::nullopt,
                    std::nullopt);
  }
  return b.take();
}

// forward_backward_pipelining_without_interleaving, not forward_only.
std::vector<ScheduleStep> one_f_one_b(int pp, int rank, int microbatches) {
  StageBuilder b(pp, rank, 1);
  const bool first = b.first(), last = b.last();
  const int warmup = std::min(pp - rank - 1, microbatches);
  const int remaining = microbatches - warmup;
  const std::optional<int> recv_chunk0 = when(true, 0);
  auto activation = [&](int microbatch) { return when(!last, ChunkMicrobatch{microbatch, 0}); };
  auto gradient = [&](int microbatch) { return when(!first, ChunkMicrobatch{microbatch, 0}); };
  const std::optional<int> recv_activation = first ? std::nullopt : recv_chunk0;
  const std::optional<int> recv_gradient = last ? std::nullopt : recv_chunk0;

  for (int i = 0; i < warmup; ++i) {
    b.communicate(P2PCall::recv_forward, std::nullopt, recv_activation, std::nullopt, std::nullopt);
    b.compute(PipelinePass::forward, i, 0);
    b.communicate(P2PCall::send_forward, std::nullopt, std::nullopt, activation(i), std::nullopt);
  }
  if (remaining > 0)
    b.communicate(P2PCall::recv_forward, std::nullopt, recv_activation, std::nullopt, std::nullopt);
  for (int i = 0; i < remaining; ++i) {
    const int forward = i + warmup;
    b.compute(PipelinePass::forward, forward, 0);
    b.communicate(P2PCall::send_forward_recv_backward, std::nullopt, std::nullopt,
                  activation(forward), recv_gradient);
    b.compute(PipelinePass::backward, i, 0);
    if (i == remaining - 1)
      b.communicate(P2PCall::send_backward, gradient(i), std::nullopt, std::nullopt, std::nullopt);
    else
      b.communicate(P2PCall::send_backward_recv_forward, gradient(i), recv_activation, std::nullopt,
                    std::nullopt);
  }
  for (int i = 0; i < warmup; ++i) {
    const int backward = remaining + i;
    b.communicate(P2PCall::recv_backward, std::nullopt, std::nullopt, std::nullopt, recv_gradient);
    b.compute(PipelinePass::backward, backward, 0);
    b.communicate(P2PCall::send_backward, gradient(backward), std::nullopt, std::nullopt,
                  std::nullopt);
  }
  return b.take();
}

// forward_backward_pipelining_with_interleaving with batch_p2p_comm, no
// overlap_p2p_comm (forward_only: every forward is a warmup forward).
class Interleaved {
 public:
  Interleaved(const PipelineScheduleConfig& c, int rank)
      : pp_(c.pp),
        rank_(rank),
        vpp_(c.vpp),
        table_(pipeline_schedule_table(c.microbatches, c.vpp, group_of(c))),
        total_(static_cast<int>(table_.size())),
        warmup_(pipeline_warmup_forwards(c, rank)),
        forward_only_(c.forward_only),
        b_(c.pp, rank, c.vpp) {}

  std::vector<ScheduleStep> build() {
    const bool first = b_.first(), last = b_.last();
    const bool all_warmup = warmup_ == total_;
    const int remaining = total_ - warmup_;
    b_.communicate(P2PCall::recv_forward, std::nullopt, when(!first, 0), std::nullopt,
                   std::nullopt);
    for (int k = 0; k < warmup_; ++k) {
      const ChunkMicrobatch f = forward(k);
      auto [recv_prev, next_chunk] = recv_from_previous_stage(k, true);
      if (k == total_ - 1) recv_prev = false;
      b_.compute(PipelinePass::forward, f.microbatch, f.chunk);
      const auto out = when(!(f.chunk == vpp_ - 1 && last), f);
      if (k == warmup_ - 1 && !forward_only_ && !all_warmup)
        b_.communicate(P2PCall::send_forward_backward_recv_forward_backward, std::nullopt,
                       when(recv_prev, next_chunk), out, when(!last, vpp_ - 1));
      else
        b_.communicate(P2PCall::send_forward_recv_forward, std::nullopt,
                       when(recv_prev, next_chunk), out, std::nullopt);
    }
    for (int k = 0; k < remaining; ++k) {
      const int forward_k = k + warmup_;
      const ChunkMicrobatch f = forward(forward_k), bw = backward(k);
      b_.compute(PipelinePass::forward, f.microbatch, f.chunk);
      b_.compute(PipelinePass::backward, bw.microbatch, bw.chunk);
      auto [recv_prev, next_forward_chunk] = recv_from_previous_stage(forward_k, true);
      const auto [recv_next, next_backward_chunk] = recv_from_previous_stage(k, false);
      if (k == remaining - 1) recv_prev = false;
      b_.communicate(P2PCall::send_forward_backward_recv_forward_backward,
                     when(!(bw.chunk == 0 && first), bw), when(recv_prev, next_forward_chunk),
                     when(!(f.chunk == vpp_ - 1 && last), f), when(recv_next, next_backward_chunk));
    }
    if (forward_only_) return b_.take();
    if (all_warmup)
      b_.communicate(P2PCall::recv_backward, std::nullopt, std::nullopt, std::nullopt,
                     when(!last, vpp_ - 1));
    for (int k = remaining; k < total_; ++k) {
      const ChunkMicrobatch bw = backward(k);
      auto [recv_next, next_chunk] = recv_from_previous_stage(k, false);
      if (k == total_ - 1) recv_next = false;
      b_.compute(PipelinePass::backward, bw.microbatch, bw.chunk);
      b_.communicate(P2PCall::send_backward_recv_backward, when(!(bw.chunk == 0 && first), bw),
                     std::nullopt, std::nullopt, when(recv_next, next_chunk));
    }
    return b_.take();
  }

 private:
  // get_model_chunk_id / get_microbatch_id_in_model_chunk.
  int chunk_id(int k, bool is_forward) const {
    const int c = table_[static_cast<std::size_t>(k % total_)].chunk;
    return is_forward ? c : vpp_ - c - 1;
  }
  ChunkMicrobatch forward(int k) const {
    return {table_[static_cast<std::size_t>(k)].microbatch, chunk_id(k, true)};
  }
  ChunkMicrobatch backward(int k) const {
    return {table_[static_cast<std::size_t>(k)].microbatch, chunk_id(k, false)};
  }

  // recv_tensor_from_previous_stage: whether iteration k receives (an
  // activation for forward, a gradient for backward) and for which chunk. The
  // leading stage (first in forward, last in backward) is pp - 1 iterations
  // ahead of the stage that feeds it around the ring.
  std::pair<bool, int> recv_from_previous_stage(int k, bool is_forward) const {
    const bool leading = is_forward ? rank_ == 0 : rank_ == pp_ - 1;
    if (!leading) return {true, chunk_id(k + 1, is_forward)};
    bool recv = true;
    int next = 0;
    if (k < pp_ - 1) {
      recv = false;
      next = chunk_id(k + 1, is_forward);
    } else {
      next = chunk_id(k - (pp_ - 1), is_forward);
    }
    if (next == (is_forward ? vpp_ - 1 : 0)) recv = false;
    return {recv, next + (is_forward ? 1 : -1)};
  }

  int pp_, rank_, vpp_;
  std::vector<ChunkMicrobatch> table_;
  int total_, warmup_;
  bool forward_only_;
  StageBuilder b_;
};

const char* tensor_name(P2PTensor t) {
  return t == P2PTensor::activation ? "activation" : "gradient";
}

}  // namespace

std::vector<PipelineLayoutViolation> validate_pipeline_schedule(const PipelineScheduleConfig& c) {
  std::vector<PipelineLayoutViolation> out;
  const int group = group_of(c);
  if (c.pp < 1) {
    out.push_back({kPp, str(c.pp), "must be at least 1"});
  } else if (c.vpp < 1) {
    out.push_back({kVpp, str(c.vpp), "must be at least 1"});
  } else if (c.microbatches < 1) {
    out.push_back({kMicrobatches, str(c.microbatches), "must be at least 1"});
  } else if (c.vpp > 1 && c.pp == 1) {
    out.push_back({kVpp, str(c.vpp), "more than one model chunk per stage needs pp > 1"});
  } else if (c.vpp > 1 && !c.microbatch_group && c.microbatches < c.pp) {
    out.push_back({kMicrobatches, str(c.microbatches),
                   "the interleaved schedule (vpp " + str(c.vpp) +
                       ") needs at least pp = " + str(c.pp) + " microbatches"});
  } else if (c.vpp > 1 && (group < c.pp || group > c.microbatches)) {
    out.push_back({kGroup, str(group),
                   "the interleaved schedule (vpp " + str(c.vpp) +
                       ") runs groups of pp = " + str(c.pp) +
                       " to microbatches = " + str(c.microbatches) + " microbatches per chunk"});
  } else if (c.vpp > 1 && c.microbatches % group != 0 && c.microbatches % group < c.pp) {
    out.push_back({kMicrobatches, str(c.microbatches),
                   c.microbatch_group
                       ? "the interleaved schedule (vpp " + str(c.vpp) + ") in groups of " +
                             str(group) + " leaves a last group of " + str(c.microbatches % group) +
                             " microbatches; it must be empty or at least pp = " + str(c.pp)
                       : "the interleaved schedule (vpp " + str(c.vpp) +
                             ") needs a multiple of pp " + str(c.pp) + " microbatches"});
  }
  return out;
}

PipelineScheduleKind pipeline_schedule_kind(const PipelineScheduleConfig& c) {
  if (c.pp <= 1) return PipelineScheduleKind::no_pipelining;
  return c.vpp > 1 ? PipelineScheduleKind::interleaved : PipelineScheduleKind::one_f_one_b;
}

std::vector<ChunkMicrobatch> pipeline_schedule_table(int microbatches, int vpp, int group) {
  std::vector<ChunkMicrobatch> table;
  PARITY_CHECK(group >= 1, "pipeline_schedule_table: group must be >= 1");
  for (int low = 0; low < microbatches; low += group) {
    // The last group takes every microbatch left.
    const int high = low + group >= microbatches ? microbatches : low + group;
    for (int chunk = 0; chunk < vpp; ++chunk)
      for (int mb = low; mb < high; ++mb) table.push_back({mb, chunk});
    if (high == microbatches) break;
  }
  return table;
}

int pipeline_warmup_forwards(const PipelineScheduleConfig& c, int pp_rank) {
  const int total = c.microbatches * c.vpp;
  int warmup = 0;
  if (c.forward_only)
    warmup = total;
  else if (c.pp > 1 && c.vpp > 1)
    warmup = (c.pp - pp_rank - 1) * 2 + (c.vpp - 1) * group_of(c);
  else if (c.pp > 1)
    warmup = c.pp - pp_rank - 1;
  return std::min(warmup, total);
}

const char* p2p_call_name(P2PCall call) {
  switch (call) {
    case P2PCall::recv_forward:
      return "recv_forward";
    case P2PCall::send_forward:
      return "send_forward";
    case P2PCall::recv_backward:
      return "recv_backward";
    case P2PCall::send_backward:
      return "send_backward";
    case P2PCall::send_forward_recv_backward:
      return "send_forward_recv_backward";
    case P2PCall::send_backward_recv_forward:
      return "send_backward_recv_forward";
    case P2PCall::send_forward_recv_forward:
      return "send_forward_recv_forward";
    case P2PCall::send_backward_recv_backward:
      return "send_backward_recv_backward";
    case P2PCall::send_forward_backward_recv_forward_backward:
      return "send_forward_backward_recv_forward_backward";
  }
  return "?";
}

std::vector<ScheduleStep> pipeline_schedule(const PipelineScheduleConfig& config, int pp_rank) {
  const auto violations = validate_pipeline_schedule(config);
  PARITY_CHECK(violations.empty(), "pipeline schedule: " + violations.front().field + " = " +
                                       violations.front().value + ": " + violations.front().rule);
  if (pp_rank < 0 || pp_rank >= config.pp)
    PARITY_FAIL("pipeline schedule: pp rank " + str(pp_rank) + " outside pp " + str(config.pp));
  switch (pipeline_schedule_kind(config)) {
    case PipelineScheduleKind::no_pipelining:
      return no_pipelining(config.microbatches, config.forward_only);
    case PipelineScheduleKind::one_f_one_b:
      return config.forward_only ? one_f_one_b_forward_only(config.pp, pp_rank, config.microbatches)
                                 : one_f_one_b(config.pp, pp_rank, config.microbatches);
    case PipelineScheduleKind::interleaved:
      return Interleaved(config, pp_rank).build();
  }
  return {};
}

std::vector<std::vector<ScheduleStep>> pipeline_schedules(const PipelineScheduleConfig& config) {
  std::vector<std::vector<ScheduleStep>> out;
  out.reserve(static_cast<std::size_t>(config.pp));
  for (int p = 0; p < config.pp; ++p) out.push_back(pipeline_schedule(config, p));
  return out;
}

std::string describe(const P2POp& op) {
  std::ostringstream s;
  const bool send = op.direction == P2PDirection::send;
  s << (send ? "send " : "recv ") << tensor_name(op.tensor) << " mb " << op.microbatch << " chunk "
    << op.chunk << (send ? " to stage " : " from stage ") << op.peer;
  return s.str();
}

std::string describe(const ScheduleStep& step) {
  if (step.kind == ScheduleStep::Kind::compute)
    return std::string(step.pass == PipelinePass::forward ? "forward" : "backward") + " mb " +
           str(step.microbatch) + " chunk " + str(step.chunk);
  std::string s = std::string(p2p_call_name(step.call)) + " [";
  for (std::size_t i = 0; i < step.ops.size(); ++i) s += (i ? "; " : "") + describe(step.ops[i]);
  return s + "]";
}

bool swap_first_activation_sends(std::vector<ScheduleStep>& steps) {
  std::vector<P2POp*> sends;
  for (ScheduleStep& s : steps)
    for (P2POp& op : s.ops)
      if (op.direction == P2PDirection::send && op.tensor == P2PTensor::activation)
        sends.push_back(&op);
  if (sends.size() < 2) return false;
  std::swap(sends[0]->microbatch, sends[1]->microbatch);
  std::swap(sends[0]->chunk, sends[1]->chunk);
  return true;
}

}  // namespace parity
