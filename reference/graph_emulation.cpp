#include "reference/graph_emulation.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <optional>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"

namespace parity::reference {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Notifications inside a replayed region go here: no host code runs on a real
// replay, so nothing may reach the caller's observer.
const TensorObservationCallback& dropping_callback() {
  static const TensorObservationCallback cb = [](const ObservationOwner&, std::string_view,
                                                 SourceKind, const at::Tensor&, OptionalDim,
                                                 OptionalDim, OptionalDim) {};
  return cb;
}

bool floating(const at::Tensor& t) { return t.defined() && at::isFloatingType(t.scalar_type()); }

struct ReplayCall : torch::CustomClassHolder {
  GraphRegion* region = nullptr;
  RngTracker* rng = nullptr;
  RngSnapshot snapshot;
  std::vector<at::Tensor> saved_inputs;  // this call's inputs (clones): backward recomputes from them
};

struct ReplayFunction : torch::autograd::Function<ReplayFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<ReplayCall> call) {
    at::NoGradGuard no_grad;
    GraphRegion& r = *call->region;
    for (size_t i = 0; i < inputs.size(); ++i) {
      r.static_inputs[i].variable_data().copy_(inputs[i]);
      call->saved_inputs.push_back(inputs[i].detach().clone());
    }
    if (call->rng != nullptr) call->snapshot = call->rng->snapshot();
    std::vector<at::Tensor> outs;
    {
      std::optional<TensorObservationCapture> frozen;
      // Fault notify-on-replay: the replay's notifications reach the caller's observer.
      if (!fault_active(CodePathFault::notify_on_replay))
        frozen.emplace(dropping_callback(), r.frozen_kinds);
      std::vector<at::Tensor> in;
      for (const at::Tensor& s : r.static_inputs) in.push_back(s.variable_data());
      outs = r.fn(in);
    }
    variable_list result;
    for (size_t i = 0; i < outs.size(); ++i) {
      // Graph kernels write the static buffer behind autograd's back: no version bump.
      r.static_outputs[i].variable_data().copy_(outs[i]);
      result.push_back(r.clone_outputs ? r.static_outputs[i].clone()
                                       : r.static_outputs[i].variable_data());
    }
    ctx->saved_data["call"] = at::IValue::make_capsule(call);
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto call = c10::static_intrusive_pointer_cast<ReplayCall>(ctx->saved_data["call"].toCapsule());
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
    for (const at::Tensor& t : in) result.push_back(t.requires_grad() ? t.grad() : at::Tensor());
    result.emplace_back();
    call->saved_inputs.clear();
    return result;
  }
};

}  // namespace

void EmulatedGraphRunner::poison(const at::Tensor& t) {
  if (floating(t)) t.variable_data().fill_(std::numeric_limits<double>::quiet_NaN());
}

void EmulatedGraphRunner::capture_region(GraphRegion& r) {
  r.static_inputs.clear();
  r.static_outputs.clear();
  std::vector<at::Tensor> in;
  for (size_t i = 0; i < r.recorded_inputs.size(); ++i) {
    at::Tensor s = at::empty_like(r.recorded_inputs[i]);
    poison(s);  // the capture's kernels never wrote it
    r.static_inputs.push_back(s);
    at::Tensor t = s.detach();
    if (r.input_requires_grad[i] && floating(t)) t.requires_grad_(true);
    in.push_back(t);
  }
  std::vector<at::Tensor> outs = r.fn(in);  // host code once; everything inside is NaN
  for (const at::Tensor& o : outs) {
    at::Tensor s = o.detach().clone();
    poison(s);
    r.static_outputs.push_back(s);
  }
}

std::vector<at::Tensor> EmulatedGraphRunner::replay_region(GraphRegion& r,
                                                           const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != r.static_inputs.size()) {
    throw std::invalid_argument("graph region " + r.name + ": replay with " +
                                std::to_string(inputs.size()) + " inputs, captured with " +
                                std::to_string(r.static_inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].sizes() != r.static_inputs[i].sizes() ||
        inputs[i].scalar_type() != r.static_inputs[i].scalar_type()) {
      throw std::invalid_argument("graph region " + r.name + ": replay input " +
                                  std::to_string(i) + " differs in shape or dtype from the capture");
    }
  }
  auto call = c10::make_intrusive<ReplayCall>();
  call->region = &r;
  call->rng = options().rng;
  return ReplayFunction::apply(at::TensorList(inputs), call);
}

void EmulatedGraphRunner::replay_iteration(const std::function<void()>& body, KindSet frozen_kinds) {
  // Fault notify-on-replay: the replayed iteration's notifications reach the caller's observer.
  if (fault_active(CodePathFault::notify_on_replay)) return body();
  auto frozen = capture_tensor_observations(dropping_callback(), frozen_kinds);
  body();
}

}  // namespace parity::reference
