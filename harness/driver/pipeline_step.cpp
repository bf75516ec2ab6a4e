#include "harness/driver/pipeline_step.h"

#include <ATen/ATen.h>

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gpt_model.h"
#include "harness/model/multi_token_prediction.h"
#include "harness/observation/execution_point.h"
#include "harness/parallel/point_to_point.h"
#include "harness/parallel/rank_status.h"

PARITY_USES_FAULT(pp_send_order);
PARITY_USES_FAULT(pp_loss_unscaled);
PARITY_USES_FAULT(pp_grads_cleared_per_microbatch);

namespace parity {

namespace {

// (activation or gradient, microbatch, chunk): a tensor this stage produced
// and has yet to send, or received and has yet to consume.
using MessageKey = std::tuple<int, int, int>;
MessageKey key_of(P2PTensor tensor, int microbatch, int chunk) {
  return {static_cast<int>(tensor), microbatch, chunk};
}

std::string describe_key(const MessageKey& k) {
  return std::string(std::get<0>(k) == static_cast<int>(P2PTensor::activation) ? "activation"
                                                                               : "gradient") +
         " of microbatch " + std::to_string(std::get<1>(k)) + " chunk " +
         std::to_string(std::get<2>(k));
}

// What a forward left for its backward.
struct LiveMicrobatch {
  at::Tensor input;   // the received hidden state (a leaf), or the tokens
  at::Tensor output;  // the hidden state sent on (not on the chunk with the loss)
  at::Tensor loss;    // the chunk with the loss only
};

// The hidden state between chunks: [seq / cp (/ tp under SP), micro batch,
// hidden] in the residual stream's dtype (Megatron's get_tensor_shapes).
at::Tensor hidden_buffer(const GPTModel& model) {
  const ModelConfig& c = model.config();
  const ParallelContext& par = model.parallel();
  std::int64_t seq = c.seq / par.cp_size();
  if (c.sequence_parallel) seq /= par.tp_size();
  const at::ScalarType dtype = c.fp32_residual ? at::kFloat : to_scalar_type(c.dtype);
  return at::empty({seq, c.micro_batch, c.hidden},
                   at::TensorOptions().dtype(dtype).device(model.device()));
}

}  // namespace

std::int64_t pipeline_message_id(std::int64_t step, bool evaluation, std::int64_t microbatches,
                                 int virtual_stages, int microbatch, int producer,
                                 P2PTensor tensor) {
  const std::int64_t run = step * 2 + (evaluation ? 1 : 0);
  return ((run * microbatches + microbatch) * virtual_stages + producer) * 2 +
         (tensor == P2PTensor::gradient ? 1 : 0);
}

std::vector<ScheduleStep> stage_schedule(const GPTModel& model, std::int64_t microbatches,
                                         bool forward_only) {
  PipelineScheduleConfig config;
  config.pp = model.parallel().pp_size();
  config.vpp = model.chunk_count();
  config.microbatches = static_cast<int>(microbatches);
  config.forward_only = forward_only;
  std::vector<ScheduleStep> steps = pipeline_schedule(config, model.parallel().pp_rank());
  // Fault pp-send-order: stage 0's first two activation sends trade places.
  if (fault_active(fault_pp_send_order) && model.parallel().pp_rank() == 0)
    swap_first_activation_sends(steps);
  return steps;
}

PipelineStepOutputs run_pipeline_microbatches(GPTModel& model, const PipelineStepInputs& in,
                                              const std::vector<ScheduleStep>& schedule) {
  const ParallelContext& par = model.parallel();
  const int pp = par.pp_size(), stage = par.pp_rank();
  const int virtual_stages = pp * model.chunk_count();
  const auto microbatches = static_cast<std::int64_t>(in.tokens.size());
  std::map<std::pair<int, int>, LiveMicrobatch> live;  // (microbatch, chunk)
  std::map<MessageKey, at::Tensor> arrived, to_send;
  PipelineStepOutputs out;
  out.logits.resize(in.tokens.size());
  out.loss.resize(in.tokens.size());
  out.token_losses.resize(in.tokens.size());
  bool holds_loss = false;

  for (const ScheduleStep& s : schedule) {
    if (s.kind == ScheduleStep::Kind::communicate) {
      if (s.ops.empty()) continue;
      std::vector<PointToPointOp> batch;
      std::vector<MessageKey> receiving;
      for (const P2POp& op : s.ops) {
        const MessageKey key = key_of(op.tensor, op.microbatch, op.chunk);
        // The producing virtual stage: activations flow up the chunk order,
        // gradients down it; the sender is the producer.
        const int here = op.chunk * pp + stage;
        const bool send = op.direction == P2PDirection::send;
        const int producer =
            send ? here : (op.tensor == P2PTensor::activation ? here - 1 : here + 1);
        const std::int64_t id =
            pipeline_message_id(in.step, in.evaluation, microbatches, virtual_stages, op.microbatch,
                                producer, op.tensor);
        if (send) {
          auto it = to_send.find(key);
          // Fault pp-send-order: the schedule's labels are swapped; the stage
          // sends what it produced first under them.
          if (fault_active(fault_pp_send_order) && it == to_send.end())
            for (auto any = to_send.begin(); any != to_send.end(); ++any)
              if (std::get<0>(any->first) == std::get<0>(key)) {
                it = any;
                break;
              }
          PARITY_CHECK_INTERNAL(it != to_send.end(),
                                "pipeline schedule sends the " + describe_key(key) +
                                    " before this stage produced it (" + describe(s) + ")");
          batch.push_back(PointToPointOp::send(op.peer, it->second, id, describe(op),
                                               static_cast<int>(op.tensor)));
          to_send.erase(it);
        } else {
          batch.push_back(PointToPointOp::recv(op.peer, hidden_buffer(model), id, describe(op),
                                               static_cast<int>(op.tensor)));
          receiving.push_back(key);
        }
      }
      std::vector<at::Tensor> got = par.pp->exchange(batch);
      for (std::size_t i = 0; i < receiving.size(); ++i) arrived[receiving[i]] = std::move(got[i]);
      continue;
    }

    const ModelChunk& chunk = model.chunk(s.chunk);
    const auto mb = static_cast<std::size_t>(s.microbatch);
    // Keep the phase: under full-iteration graphs the runner set it around the schedule.
    ExecutionPointScope point(
        ExecutionPoint{in.step, s.microbatch, current_execution_point().phase});
    auto take = [&](P2PTensor tensor) {
      auto it = arrived.find(key_of(tensor, s.microbatch, s.chunk));
      PARITY_CHECK_INTERNAL(it != arrived.end(),
                            "pipeline schedule runs " + describe(s) + " before the " +
                                describe_key(key_of(tensor, s.microbatch, s.chunk)) + " arrived");
      at::Tensor t = std::move(it->second);
      arrived.erase(it);
      return t;
    };
    if (s.pass == PipelinePass::forward) {
      step_heartbeat(StepPass::forward);
      LiveMicrobatch l;
      l.input = chunk.first_virtual_stage ? in.tokens[mb]
                : in.evaluation           ? take(P2PTensor::activation)
                                : take(P2PTensor::activation).detach().requires_grad_(true);
      const MtpBatch* mtp = chunk.has_head && in.mtp ? &(*in.mtp)[mb] : nullptr;
      at::Tensor output = model.forward_chunk(s.chunk, l.input, in.positions,
                                              model.config().runtime_gather_output, mtp);
      if (chunk.last_virtual_stage) {
        const at::Tensor token_losses = model.token_losses(output, in.labels[mb]);
        l.loss = token_losses.sum() / in.batch_tokens;
        out.logits[mb] = output.detach();
        out.loss[mb] = l.loss.detach();
        out.token_losses[mb] = token_losses.detach();
        holds_loss = true;
      } else {
        to_send[key_of(P2PTensor::activation, s.microbatch, s.chunk)] =
            output.detach().contiguous();
        l.output = std::move(output);
      }
      if (!in.evaluation) live[{s.microbatch, s.chunk}] = std::move(l);
      continue;
    }
    auto it = live.find({s.microbatch, s.chunk});
    PARITY_CHECK_INTERNAL(it != live.end(),
                          "pipeline schedule runs " + describe(s) + " before its forward");
    LiveMicrobatch l = std::move(it->second);
    live.erase(it);
    step_heartbeat(StepPass::backward);
    // Fault pp-grads-cleared-per-microbatch: only the last microbatch's gradients stay.
    if (fault_active(fault_pp_grads_cleared_per_microbatch))
      for (Parameter& p : model.parameters())
        if (p.value.grad().defined()) p.value.mutable_grad().zero_();
    model.backward_starts();
    if (chunk.last_virtual_stage) {
      // Fault pp-loss-unscaled: the summed token loss, not its share of the mean.
      if (fault_active(fault_pp_loss_unscaled)) {
        (l.loss * in.batch_tokens).backward();
      } else {
        l.loss.backward();
      }
    } else {
      l.output.backward(take(P2PTensor::gradient));
    }
    step_heartbeat(StepPass::backward);
    model.backward_finished(s.chunk);
    if (!chunk.first_virtual_stage) {
      at::Tensor g = l.input.grad();
      to_send[key_of(P2PTensor::gradient, s.microbatch, s.chunk)] =
          g.defined() ? g.contiguous() : at::zeros_like(l.input);
    }
  }
  // A schedule that leaves work behind is a bug in the schedule, not in the run.
  std::string left;
  for (const auto& [k, t] : live)
    left += " forward of microbatch " + std::to_string(k.first) + " chunk " +
            std::to_string(k.second) + " never ran backward;";
  for (const auto& [k, t] : arrived) left += " the received " + describe_key(k) + " was unused;";
  for (const auto& [k, t] : to_send) left += " the " + describe_key(k) + " was never sent;";
  PARITY_CHECK_INTERNAL(left.empty(), "pipeline schedule of stage " + std::to_string(stage) +
                                          " is incomplete:" + left);
  if (!holds_loss) out = PipelineStepOutputs{};
  return out;
}

}  // namespace parity
