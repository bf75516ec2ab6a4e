#include "harness/graphs/graph_runner.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <stdexcept>
#include <utility>

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"
#include "harness/observation/thread_context.h"
#include "harness/recompute/checkpoint.h"

PARITY_USES_FAULT(warmup_counted_as_step);
PARITY_USES_FAULT(static_grad_aliasing);

namespace parity {

KindSet live_observation_kinds() {
  KindSet s;
  for (int k = 0; k < kSourceKindCount; ++k) {
    if (is_observing_tensor(static_cast<SourceKind>(k))) s.insert(static_cast<SourceKind>(k));
  }
  return s;
}

namespace {

class RngPutBack {
 public:
  explicit RngPutBack(RngTracker* rng) : rng_(rng) {
    if (rng_ != nullptr) state_ = rng_->snapshot();
  }
  ~RngPutBack() {
    if (rng_ != nullptr) rng_->restore(state_);
  }
  RngPutBack(const RngPutBack&) = delete;
  RngPutBack& operator=(const RngPutBack&) = delete;

 private:
  RngTracker* rng_;
  RngSnapshot state_;
};

bool floating(const at::Tensor& t) { return t.defined() && at::isFloatingType(t.scalar_type()); }

}  // namespace

GraphRegion* PhasedGraphRunner::find(const std::string& name) {
  for (GraphRegion& r : regions_) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

GraphPhase PhasedGraphRunner::phase() const { return current_execution_point().phase; }

std::vector<at::Tensor> PhasedGraphRunner::run_region(const std::string& name, const RegionFn& fn,
                                                      const std::vector<at::Tensor>& inputs,
                                                      bool clone_outputs) {
  if (options_.mode != GraphMode::per_layer) return fn(inputs);
  const std::int64_t step = current_execution_point().step;
  if (!created_ && recorded_step_known_ && step >= 0 && step != recorded_step_) create_graphs();

  if (!created_) {
    // Record: eager, inside sites fire normally; the first call's inputs are kept.
    if (!recorded_step_known_ && step >= 0) {
      recorded_step_known_ = true;
      recorded_step_ = step;
    }
    if (find(name) == nullptr) {
      GraphRegion r;
      r.name = name;
      r.fn = fn;
      r.clone_outputs = clone_outputs;
      for (const at::Tensor& t : inputs) {
        r.recorded_inputs.push_back(t.detach().clone());
        r.input_requires_grad.push_back(t.requires_grad());
      }
      regions_.push_back(std::move(r));
    }
    GraphPhaseScope record(GraphPhase::record);
    return fn(inputs);
  }

  GraphRegion* region = find(name);
  if (region == nullptr) {
    PARITY_FAIL_INTERNAL("graph region " + name +
                         " was not recorded before the graphs were created");
  }
  PARITY_CHECK_INTERNAL(region->captured, "graph region " + name + " was not captured");
  GraphPhaseScope replay(GraphPhase::replay);
  ++region->replays;
  return replay_region(*region, inputs);
}

void PhasedGraphRunner::create_graphs() {
  if (options_.mode != GraphMode::per_layer || created_ || regions_.empty()) return;
  RngPutBack rng(options_.rng);
  const ExecutionPoint caller = current_execution_point();
  ExecutionPointScope between_steps(ExecutionPoint{-1, -1, caller.phase});
  for (GraphRegion& region : regions_) {
    // Warmup: eager runs on cloned inputs, grad on, checkpoints bypassed, and a
    // backward with zero output gradients that does not touch .grad.
    for (std::int64_t k = 0; k < options_.warmup; ++k) {
      std::optional<ExecutionPointScope> counted;
      // Fault warmup-counted-as-step: the warmup run is labelled with the caller's training step.
      if (fault_active(fault_warmup_counted_as_step)) counted.emplace(caller);
      GraphPhaseScope warmup(GraphPhase::warmup);
      at::AutoGradMode grad_on(true);
      std::vector<at::Tensor> in;
      std::vector<at::Tensor> wrt;
      for (size_t i = 0; i < region.recorded_inputs.size(); ++i) {
        at::Tensor t = region.recorded_inputs[i].clone();
        if (region.input_requires_grad[i] && floating(t)) {
          t.requires_grad_(true);
          wrt.push_back(t);
        }
        in.push_back(t);
      }
      std::vector<at::Tensor> outs = region.fn(in);
      std::vector<at::Tensor> roots, grads;
      for (const at::Tensor& o : outs) {
        if (o.defined() && o.requires_grad()) {
          roots.push_back(o);
          grads.push_back(at::zeros_like(o));
        }
      }
      if (!roots.empty() && !wrt.empty()) {
        torch::autograd::grad(roots, wrt, grads, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
      }
      ++region.warmups;
    }
    GraphPhaseScope capture(GraphPhase::capture);
    at::AutoGradMode grad_on(true);
    region.frozen_kinds = live_observation_kinds();
    capture_region(region);
    region.captured = true;
  }
  created_ = true;
}

void PhasedGraphRunner::end_step() {
  if (options_.mode == GraphMode::per_layer) create_graphs();
}

std::vector<at::Tensor> PhasedGraphRunner::run_iteration(const RegionFn& body,
                                                         const std::vector<at::Tensor>& inputs) {
  if (options_.mode != GraphMode::full_iteration) return body(inputs);
  const std::int64_t it = iteration_++;
  if (it < options_.warmup) return body(inputs);  // eager iterations: observed normally
  GraphRegion& iteration = iteration_region_;
  if (it == options_.warmup) {
    // Capture: host code once on static copies of the inputs, kernels "not
    // run": contents undefined, and no memory effect survives (the RNG here;
    // parameters and gradients in the backend's bracket).
    iteration.name = "iteration";
    iteration.fn = body;
    iteration.static_inputs.clear();
    for (const at::Tensor& t : inputs) iteration.static_inputs.push_back(t.detach().clone());
    RngPutBack rng(options_.rng);
    GraphPhaseScope capture(GraphPhase::capture);
    iteration.frozen_kinds = live_observation_kinds();
    begin_iteration_capture();
    std::vector<at::Tensor> outs;
    try {
      outs = body(iteration.static_inputs);
    } catch (...) {
      end_iteration_capture(/*completed=*/false);
      throw;
    }
    end_iteration_capture(/*completed=*/true);
    iteration.static_outputs.clear();
    for (const at::Tensor& o : outs) iteration.static_outputs.push_back(o.detach());
    iteration.captured = true;
  }
  {
    at::NoGradGuard no_grad;
    PARITY_CHECK(inputs.size() == iteration.static_inputs.size(),
                 "full-iteration graph: replay with " + std::to_string(inputs.size()) +
                     " inputs, captured with " + std::to_string(iteration.static_inputs.size()));
    for (size_t i = 0; i < inputs.size(); ++i) iteration.static_inputs[i].copy_(inputs[i]);
  }
  // A replay runs the captured kernels; a backend that emulates them (the
  // reference) runs this call's body, the same code: the body captured earlier
  // refers to its own step's frame, gone by now.
  iteration.fn = body;
  GraphPhaseScope replay(GraphPhase::replay);
  ++iteration.replays;
  return replay_iteration(iteration);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ReplayCall : torch::CustomClassHolder {
  GraphRegion* region = nullptr;
  RngTracker* rng = nullptr;
  RngSnapshot snapshot;
  std::vector<at::Tensor>
      saved_inputs;  // this call's inputs (clones): backward recomputes from them
  std::function<void(GraphRegion&)> execute;
  OriginContext origin;
};

struct ReplayFunction : torch::autograd::Function<ReplayFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<ReplayCall> call) {
    at::NoGradGuard no_grad;
    GraphRegion& r = *call->region;
    call->origin = capture_origin_context();
    for (size_t i = 0; i < inputs.size(); ++i) {
      r.static_inputs[i].variable_data().copy_(inputs[i]);
      call->saved_inputs.push_back(inputs[i].detach().clone());
    }
    if (call->rng != nullptr) call->snapshot = call->rng->snapshot();
    call->execute(r);
    variable_list result;
    for (const at::Tensor& s : r.static_outputs)
      result.push_back(r.clone_outputs ? s.clone() : s.variable_data());
    ctx->saved_data["call"] = at::IValue::make_capsule(std::move(call));
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto call = c10::static_intrusive_pointer_cast<ReplayCall>(ctx->saved_data["call"].toCapsule());
    OriginContextScope origin(call->origin);
    GraphRegion& r = *call->region;
    std::vector<at::Tensor> in;
    for (size_t i = 0; i < call->saved_inputs.size(); ++i) {
      at::Tensor t = call->saved_inputs[i];
      if (r.input_requires_grad[i] && floating(t)) t.requires_grad_(true);
      in.push_back(t);
    }
    std::vector<at::Tensor> outs;
    {
      RngSnapshot backward_state;
      if (call->rng != nullptr) {
        backward_state = call->rng->snapshot();
        call->rng->restore(call->snapshot);
      }
      GraphPhaseScope replay(GraphPhase::replay);  // checkpoints stay bypassed
      at::AutoGradMode grad_on(true);
      auto quiet = suspend_tensor_observations();
      RecomputationScope recomputing;  // the forward replay was this region's execution
      outs = r.fn(in);
      if (call->rng != nullptr) call->rng->restore(backward_state);
    }
    variable_list roots, root_grads;
    for (size_t i = 0; i < outs.size() && i < grads.size(); ++i) {
      if (outs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list result;
    for (std::size_t i = 0; i < in.size(); ++i) {
      at::Tensor g = in[i].requires_grad() ? in[i].grad() : at::Tensor();
      // Fault static-grad-aliasing: the gradient goes back in the region's static
      // input buffer, which the region's next replay overwrites.
      if (g.defined() && fault_active(fault_static_grad_aliasing)) {
        at::Tensor buffer = r.static_inputs[i].variable_data();
        buffer.copy_(g);
        g = buffer;
      }
      result.push_back(g);
    }
    result.emplace_back();
    call->saved_inputs.clear();
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> PhasedGraphRunner::replay_with_recompute_backward(
    GraphRegion& r, const std::vector<at::Tensor>& inputs,
    const std::function<void(GraphRegion&)>& execute) {
  if (inputs.size() != r.static_inputs.size()) {
    PARITY_FAIL("graph region " + r.name + ": replay with " + std::to_string(inputs.size()) +
                " inputs, captured with " + std::to_string(r.static_inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].sizes() != r.static_inputs[i].sizes() ||
        inputs[i].scalar_type() != r.static_inputs[i].scalar_type()) {
      PARITY_FAIL("graph region " + r.name + ": replay input " + std::to_string(i) +
                  " differs in shape or dtype from the capture");
    }
  }
  auto call = c10::make_intrusive<ReplayCall>();
  call->region = &r;
  call->rng = options_.rng;
  call->execute = execute;
  return ReplayFunction::apply(at::TensorList(inputs), call);
}

void PhasedGraphRunner::poison_if_capturing(const at::Tensor& t) {
  if (options_.mode == GraphMode::full_iteration && phase() == GraphPhase::capture) poison(t);
}

}  // namespace parity
