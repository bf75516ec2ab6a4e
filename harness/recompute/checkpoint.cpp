#include "harness/recompute/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <memory>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"
#include "harness/observation/thread_context.h"

PARITY_USES_FAULT(chunk_recompute_observed);
PARITY_USES_FAULT(grad_mode_gating);
PARITY_USES_FAULT(missing_recompute_suspension);
PARITY_USES_FAULT(observe_recompute_not_forward);
PARITY_USES_FAULT(recompute_rng_not_restored);

namespace parity {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---------------------------------------------------------------- log

bool any_kind_live() {
  for (int k = 0; k < kSourceKindCount; ++k) {
    if (is_observing_tensor(static_cast<SourceKind>(k))) return true;
  }
  return false;
}

void log_execution(std::string_view name, RecomputeExecution e) {
  RecomputeLog* log = detail::thread_recompute_log();
  if (log == nullptr) return;
  log->push_back(RecomputeEvent{std::string(name), e, at::GradMode::is_enabled(), any_kind_live()});
}

// Restores the tracker to `snapshot` for the recomputation and puts back the
// state it had at backward time afterwards (Megatron's _set_cuda_rng_state /
// tracker.set_states pair), exceptions included.
class RngRestoreScope {
 public:
  RngRestoreScope(RngTracker* rng, const RngSnapshot& snapshot) : rng_(rng) {
    if (rng_ == nullptr) return;
    backward_state_ = rng_->snapshot();
    // Fault recompute-rng-not-restored (allenai/OLMo-core PR 828): the
    // recomputation draws new masks from the backward-time state.
    if (!fault_active(fault_recompute_rng_not_restored)) rng_->restore(snapshot);
  }
  ~RngRestoreScope() {
    if (rng_ != nullptr) rng_->restore(backward_state_);
  }
  RngRestoreScope(const RngRestoreScope&) = delete;
  RngRestoreScope& operator=(const RngRestoreScope&) = delete;

 private:
  RngTracker* rng_;
  RngSnapshot backward_state_;
};

// The recomputation's observation rule: suspended (the forward was the
// observed execution), unless a code-path fault removes the suspension.
struct RecomputeObservationScope {
  std::optional<TensorObservationSuspension> quiet;
  // `delayed`: other microbatches were forwarded since this checkpoint's
  // forward (a pipeline stage's backward).
  explicit RecomputeObservationScope(bool delayed = false) {
    // Fault chunk-recompute-observed: a delayed recomputation is taken for a new forward.
    if (delayed && fault_active(fault_chunk_recompute_observed)) return;
    // Fault missing-recompute-suspension: no suspension, sites observed twice.
    if (fault_active(fault_missing_recompute_suspension)) return;
    // Fault observe-recompute-not-forward: the recomputation is the observed execution.
    if (fault_active(fault_observe_recompute_not_forward)) return;
    // Fault grad-mode-gating: no suspension; only the observer's grad-mode gate remains.
    if (fault_active(fault_grad_mode_gating)) return;
    quiet.emplace();
  }
};

// The checkpointed forward's observation rule: observed (the one execution
// that counts), unless a code-path fault moves the observation to the recompute.
struct ForwardObservationScope {
  std::optional<TensorObservationSuspension> quiet;
  ForwardObservationScope() {
    // Fault observe-recompute-not-forward: the forward is suspended instead of the recompute.
    if (fault_active(fault_observe_recompute_not_forward)) quiet.emplace();
  }
};

at::Tensor detached_like(const at::Tensor& t) {
  if (!t.defined()) return t;
  at::Tensor d = t.detach();
  d.requires_grad_(t.requires_grad());
  return d;
}

// ---------------------------------------------------------------- checkpoint
// The microbatch of the latest checkpointed forward of the rank thread; a
// checkpoint keeps the pointer, since a CUDA backward runs on another thread.
std::shared_ptr<std::int64_t> latest_forward_microbatch() {
  thread_local auto latest = std::make_shared<std::int64_t>(-1);
  return latest;
}

struct CheckpointState : torch::CustomClassHolder {
  CheckpointFn fn;
  std::shared_ptr<std::int64_t> latest_forward;
  std::int64_t forward_microbatch = -1;
  RngTracker* rng = nullptr;
  RngSnapshot snapshot;
  std::string name;
  OriginContext origin;  // the rank thread's context: a CUDA backward runs on another thread
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<CheckpointState>& state) {
    at::NoGradGuard no_grad;
    state->origin = capture_origin_context();
    state->latest_forward = latest_forward_microbatch();
    state->forward_microbatch = *state->latest_forward = current_execution_point().microbatch;
    if (state->rng != nullptr) state->snapshot = state->rng->snapshot();
    std::vector<at::Tensor> in(inputs.begin(), inputs.end());
    std::vector<at::Tensor> outs;
    {
      ForwardObservationScope observed;
      log_execution(state->name, RecomputeExecution::forward);
      outs = state->fn(in);
    }
    // An output that aliases an input would make the node's outputs views of its
    // inputs; checkpointed functions return fresh tensors, keep it that way.
    for (at::Tensor& o : outs) {
      for (const at::Tensor& i : in) {
        if (o.defined() && i.defined() && o.is_alias_of(i)) {
          o = o.clone();
          break;
        }
      }
    }
    ctx->save_for_backward(in);
    ctx->saved_data["state"] = at::IValue::make_capsule(state);
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto state =
        c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    OriginContextScope origin(state->origin);
    std::vector<at::Tensor> detached;
    for (const at::Tensor& s : ctx->get_saved_variables()) detached.push_back(detached_like(s));
    std::vector<at::Tensor> outs;
    {
      RngRestoreScope rng(state->rng, state->snapshot);
      at::AutoGradMode enable_grad(true);
      RecomputeObservationScope quiet(*state->latest_forward != state->forward_microbatch);
      RecomputationScope recomputing;
      log_execution(state->name, RecomputeExecution::recompute);
      outs = state->fn(detached);
    }
    variable_list roots, root_grads;
    for (size_t i = 0; i < outs.size() && i < grads.size(); ++i) {
      if (outs[i].defined() && outs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list result;
    for (const at::Tensor& d : detached) {
      result.push_back(d.defined() && d.requires_grad() ? d.grad() : at::Tensor());
    }
    result.emplace_back();  // the state argument
    return result;
  }
};

}  // namespace

// ---------------------------------------------------------------- public
bool checkpoint_bypassed() {
  const GraphPhase p = current_execution_point().phase;
  return p == GraphPhase::warmup || p == GraphPhase::capture || p == GraphPhase::replay;
}

namespace {
thread_local int t_recomputation_depth = 0;
}  // namespace

RecomputationScope::RecomputationScope() { ++t_recomputation_depth; }
RecomputationScope::~RecomputationScope() { --t_recomputation_depth; }
bool in_recomputation() { return t_recomputation_depth > 0; }

std::string_view to_string(RecomputeExecution e) {
  switch (e) {
    case RecomputeExecution::forward:
      return "forward";
    case RecomputeExecution::recompute:
      return "recompute";
    case RecomputeExecution::bypass:
      return "bypass";
  }
  return "?";
}

RecomputeLogScope::RecomputeLogScope(std::vector<RecomputeEvent>* log)
    : previous_(detail::thread_recompute_log()), outer_(detail::thread_recompute_log_owner()) {
  detail::thread_recompute_log() = log;
  detail::thread_recompute_log_owner() = this;
}
RecomputeLogScope::~RecomputeLogScope() {
  if (detail::thread_recompute_log_owner() != this)
    detail::scope_destroyed_out_of_order("RecomputeLogScope");
  detail::thread_recompute_log() = previous_;
  detail::thread_recompute_log_owner() = outer_;
}

std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                   RngTracker* rng, std::string_view name) {
  if (checkpoint_bypassed()) {
    log_execution(name, RecomputeExecution::bypass);
    return fn(inputs);
  }
  auto state = c10::make_intrusive<CheckpointState>();
  state->fn = fn;
  state->rng = rng;
  state->name = std::string(name);
  return CheckpointFunction::apply(at::TensorList(inputs), state);
}

// ---------------------------------------------------------------- without output
namespace detail {

struct WithoutOutputState : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> fn;
  std::shared_ptr<std::int64_t> latest_forward;  // as CheckpointState's
  std::int64_t forward_microbatch = -1;
  RngTracker* rng = nullptr;
  RngSnapshot snapshot;
  std::string name;
  OriginContext origin;  // the rank thread's context: a CUDA backward runs on another thread
  at::Tensor input;      // the forward input (no cycle: its history is upstream)
  // The forward output's storage and layout (never the tensor itself: the
  // tensor's grad_fn holds this state, a reference back would be a cycle).
  c10::Storage output_storage;
  std::vector<std::int64_t> output_sizes, output_strides;
  std::int64_t output_offset = 0;
  at::TensorOptions output_options;
  std::size_t output_nbytes = 0;
  bool discarded = false;
  // Set by recompute(): the grad-enabled output and the detached input.
  at::Tensor recomputed, detached_input;

  void recompute() {
    if (recomputed.defined()) return;
    OriginContextScope origin_context(origin);
    detached_input = detached_like(input);
    {
      RngRestoreScope restore(rng, snapshot);
      at::AutoGradMode enable_grad(true);
      RecomputeObservationScope quiet(*latest_forward != forward_microbatch);
      RecomputationScope recomputing;
      log_execution(name, RecomputeExecution::recompute);
      recomputed = fn(detached_input);
    }
    if (discarded) {
      // Reallocate the freed storage and refill it with the recomputed values,
      // outside autograd (no version bump: the consumer's saved tensor is valid again).
      c10::StorageImpl* impl = output_storage.unsafeGetStorageImpl();
      impl->set_data_ptr_noswap(impl->allocator()->allocate(output_nbytes));
      impl->set_nbytes(output_nbytes);
      at::NoGradGuard no_grad;
      at::Tensor view = at::empty({0}, output_options);
      view.set_(output_storage, output_offset, output_sizes, output_strides);
      view.copy_(recomputed.detach());
      discarded = false;
    }
  }
};

}  // namespace detail

namespace {
using detail::WithoutOutputState;

struct CheckpointWithoutOutputFunction
    : torch::autograd::Function<CheckpointWithoutOutputFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            const c10::intrusive_ptr<WithoutOutputState>& state) {
    at::NoGradGuard no_grad;
    state->origin = capture_origin_context();
    state->latest_forward = latest_forward_microbatch();
    state->forward_microbatch = *state->latest_forward = current_execution_point().microbatch;
    if (state->rng != nullptr) state->snapshot = state->rng->snapshot();
    at::Tensor out;
    {
      ForwardObservationScope observed;
      log_execution(state->name, RecomputeExecution::forward);
      out = state->fn(input);
    }
    if (out.is_alias_of(input)) out = out.clone();
    state->input = input;
    ctx->saved_data["state"] = at::IValue::make_capsule(state);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<WithoutOutputState>(
        ctx->saved_data["state"].toCapsule());
    state->recompute();  // a no-op when the hook already ran
    if (grads[0].defined() && state->recomputed.requires_grad()) {
      torch::autograd::backward({state->recomputed}, {grads[0]});
    }
    at::Tensor g =
        state->detached_input.requires_grad() ? state->detached_input.grad() : at::Tensor();
    // Drop the recomputed graph and the input now (a second backward is not supported).
    state->recomputed = at::Tensor();
    state->detached_input = at::Tensor();
    state->input = at::Tensor();
    return {g, at::Tensor()};
  }
};

WithoutOutputState& as_state(const c10::intrusive_ptr<torch::CustomClassHolder>& p) {
  return *static_cast<WithoutOutputState*>(p.get());
}

}  // namespace

CheckpointWithoutOutput::CheckpointWithoutOutput(RngTracker* rng, std::string name)
    : rng_(rng), name_(std::move(name)) {}
CheckpointWithoutOutput::~CheckpointWithoutOutput() = default;

at::Tensor CheckpointWithoutOutput::checkpoint(
    const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input) {
  if (state_) PARITY_FAIL_INTERNAL("CheckpointWithoutOutput::checkpoint called twice");
  if (checkpoint_bypassed()) {
    log_execution(name_, RecomputeExecution::bypass);
    return fn(input);
  }
  auto state = c10::make_intrusive<WithoutOutputState>();
  state->fn = fn;
  state->rng = rng_;
  state->name = name_;
  at::Tensor out = CheckpointWithoutOutputFunction::apply(input, state);
  state->output_storage = out.storage();
  state->output_sizes = out.sizes().vec();
  state->output_strides = out.strides().vec();
  state->output_offset = out.storage_offset();
  state->output_options = out.options();
  state->output_nbytes = out.storage().nbytes();
  state_ = state;
  return out;
}

void CheckpointWithoutOutput::discard_output_and_register_recompute(const at::Tensor& hook_tensor) {
  if (!state_) return;  // bypassed (graph phases) or never checkpointed
  WithoutOutputState& s = as_state(state_);
  // Nothing will come back through backward: keep the output (no-grad forwards).
  if (!hook_tensor.requires_grad() || !s.input.requires_grad()) return;
  c10::StorageImpl* impl = s.output_storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, impl->device()));  // frees the memory
  impl->set_nbytes(0);
  s.discarded = true;
  c10::intrusive_ptr<torch::CustomClassHolder> keep = state_;
  hook_tensor.register_hook([keep](const at::Tensor&) { as_state(keep).recompute(); });
}

bool CheckpointWithoutOutput::output_discarded() const {
  return state_ && as_state(state_).discarded;
}

}  // namespace parity
