#pragma once
// Activation recompute (megatron-reference.md section 5, contract.md section 3).
//
// checkpoint(fn, inputs): Megatron's tensor_parallel.checkpoint (CheckpointFunction,
// reentrant). The forward runs `fn` under no-grad, saving the inputs and the RNG
// tracker's snapshot; the backward restores the RNG state, detaches the inputs,
// re-runs `fn` under enable-grad INSIDE suspend_tensor_observations(), puts the
// tracker back where it was, and back-propagates through the recomputed outputs
// (a reentrant torch::autograd::backward, so parameter gradients accumulate
// into .grad as in Megatron). The original no-grad forward is the one observed
// execution; the recomputation is never observed.
//
// During graph warmup/capture (and, in the CPU emulation, replay: the captured
// graph contains the bypassed region) the checkpoint runs `fn` directly, once,
// grad-enabled (Megatron's is_graph_warmup()/is_graph_capturing() bypass). The
// phase comes from the thread's ExecutionPoint.
//
// At least one input must require grad for a backward to reach the checkpoint
// (Megatron has the same rule); parameters used by `fn` are not inputs.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>  // torch::CustomClassHolder

#include "harness/backend/backend.h"

namespace parity {

using CheckpointFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// True when checkpoints must run their function directly (graph warmup,
// capture, or the emulated replay of a captured region).
bool checkpoint_bypassed();

// True on this thread while a checkpoint recomputes its function (both kinds),
// or the CPU graph emulation recomputes a replayed region for its backward:
// what runs now already ran once in this microbatch's forward. State that
// counts forward executions (Megatron's MoE loss tracker) records nothing then.
bool in_recomputation();
// RAII: in_recomputation() is true on this thread for its lifetime.
class [[nodiscard]] RecomputationScope {
 public:
  RecomputationScope();
  ~RecomputationScope();
  RecomputationScope(const RecomputationScope&) = delete;
  RecomputationScope& operator=(const RecomputationScope&) = delete;
};

// Megatron's tensor_parallel.checkpoint. `rng` may be null (no random ops in
// fn). `name` labels the region in the recompute log.
std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                   RngTracker* rng, std::string_view name = {});

// Megatron's CheckpointWithoutOutput (selective "layernorm" recompute):
//
//   CheckpointWithoutOutput ckpt(rng, "decoder.layers.0.input_layernorm");
//   at::Tensor ln = ckpt.checkpoint(norm_fn, x);      // no-grad forward, observed
//   auto out = consumer(ln);                            // e.g. self-attention
//   ckpt.discard_output_and_register_recompute(out);    // frees ln's storage
//
// discard_output_and_register_recompute frees the output's storage (the tensor
// keeps its sizes, its data is gone: memory is really returned) and registers
// a gradient hook on `hook_tensor`. When the gradient reaches hook_tensor - that
// is, before the consumer's backward needs the output - the hook restores the
// RNG state, re-runs fn under enable-grad inside suspend_tensor_observations(),
// and refills the freed storage with the recomputed values (no version bump,
// as Megatron's untyped_storage().copy_). The function's own backward then
// back-propagates through the recomputed, grad-enabled output.
//
// Differences from Megatron: one object per call (no manager/unified hook);
// the recomputed output is copied into a reallocated storage rather than
// Megatron's resize_ of the same storage object (same effect: the consumer's
// saved tensor sees the values again); if discard is never called, the
// function's backward recomputes on its own. During graph warmup/capture/replay
// checkpoint() runs fn directly and discard is a no-op.
class CheckpointWithoutOutput {
 public:
  explicit CheckpointWithoutOutput(RngTracker* rng, std::string name = {});
  ~CheckpointWithoutOutput();
  CheckpointWithoutOutput(const CheckpointWithoutOutput&) = delete;
  CheckpointWithoutOutput& operator=(const CheckpointWithoutOutput&) = delete;

  at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn,
                        const at::Tensor& input);
  void discard_output_and_register_recompute(const at::Tensor& hook_tensor);
  // Whether the output's storage is currently freed (tests).
  bool output_discarded() const;

 private:
  RngTracker* rng_;
  std::string name_;
  // A detail::WithoutOutputState, shared with the autograd node and the hook.
  c10::intrusive_ptr<torch::CustomClassHolder> state_;
};

// ---- recompute log (tests and diagnostics) ----
// Every execution of a checkpointed function, in order, on this thread.
enum class RecomputeExecution : std::int8_t {
  forward,    // the original forward (no-grad, observed)
  recompute,  // the backward recomputation (grad on, suspended)
  bypass,     // run directly (graph warmup/capture/replay)
};
std::string_view to_string(RecomputeExecution e);

struct RecomputeEvent {
  std::string name;
  RecomputeExecution execution;
  bool grad_enabled;       // at::GradMode at the call of fn
  bool observations_live;  // whether any kind reached a callback at the call of fn
};

// RAII: records this thread's checkpoint executions into `log` while alive
// (the previous log, if any, is restored on exit). The log travels with the
// per-thread context (harness/observation/thread_context.h).
class [[nodiscard]] RecomputeLogScope {
 public:
  explicit RecomputeLogScope(std::vector<RecomputeEvent>* log);
  ~RecomputeLogScope();
  RecomputeLogScope(const RecomputeLogScope&) = delete;
  RecomputeLogScope& operator=(const RecomputeLogScope&) = delete;

 private:
  std::vector<RecomputeEvent>* previous_;
  const void* outer_;
};

// ---- code-path faults (harness/faults/code_path_faults.h) ----
// missing-recompute-suspension: the recomputation runs without
// suspend_tensor_observations() (sites inside a checkpoint observed twice).
// observe-recompute-not-forward: the forward is suspended and the
// recomputation observed instead. grad-mode-gating: the recomputation is not
// suspended (the observer's grad-mode gate hides the no-grad forward instead).

}  // namespace parity
