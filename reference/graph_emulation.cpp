#include "reference/graph_emulation.h"

#include <ATen/ATen.h>

#include <limits>
#include <optional>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"

PARITY_USES_FAULT(notify_on_replay);
PARITY_USES_FAULT(router_silent_missing);

namespace parity::reference {
namespace {

// Notifications inside a replayed region go here: no host code runs on a real
// replay, so nothing may reach the caller's observer.
const TensorObservationCallback& dropping_callback() {
  static const TensorObservationCallback cb = [](const ObservationOwner&, std::string_view,
                                                 SourceKind, const at::Tensor&, OptionalDim,
                                                 OptionalDim, OptionalDim) {};
  return cb;
}

bool floating(const at::Tensor& t) { return t.defined() && at::isFloatingType(t.scalar_type()); }

// The region's math on its static inputs, with the notifications a replay makes
// (none) and the is_observing answers frozen at capture.
std::vector<at::Tensor> run_as_replay(GraphRegion& r) {
  std::optional<TensorObservationCapture> frozen;
  // Fault router-silent-missing: the router sites' notifications (and only
  // theirs) reach the caller's observer.
  const detail::ActiveObserver* outer = detail::observation_state.active;
  TensorObservationCallback router_leak;
  if (fault_active(fault_router_silent_missing) && outer) {
    const TensorObservationCallback* caller = outer->callback;
    router_leak = [caller](const ObservationOwner& owner, std::string_view name, SourceKind kind,
                           const at::Tensor& t, OptionalDim tp, OptionalDim seq,
                           OptionalDim batch) {
      if (kind == SourceKind::router_logits || kind == SourceKind::router_scores ||
          kind == SourceKind::router_diagnostics)
        (*caller)(owner, name, kind, t, tp, seq, batch);
    };
  }
  // Fault notify-on-replay: the replay's notifications reach the caller's observer.
  if (!fault_active(fault_notify_on_replay))
    frozen.emplace(router_leak ? router_leak : dropping_callback(), r.frozen_kinds);
  std::vector<at::Tensor> in;
  for (const at::Tensor& s : r.static_inputs) in.push_back(s.variable_data());
  return r.fn(in);
}

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

std::vector<at::Tensor> EmulatedGraphRunner::replay_region(GraphRegion& region,
                                                           const std::vector<at::Tensor>& inputs) {
  return replay_with_recompute_backward(region, inputs, [](GraphRegion& r) {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> outs = run_as_replay(r);
    // Graph kernels write the static buffer behind autograd's back: no version bump.
    for (size_t i = 0; i < outs.size(); ++i) r.static_outputs[i].variable_data().copy_(outs[i]);
  });
}

void EmulatedGraphRunner::begin_iteration_capture() {
  // The host execution of the capture runs kernels; a real capture does not.
  // Keep what it will change (parameters and their gradients) to put it back.
  preserved_values_.clear();
  preserved_grads_.clear();
  for (const at::Tensor& p : static_parameters()) {
    preserved_values_.push_back(p.detach().clone());
    preserved_grads_.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  }
}

void EmulatedGraphRunner::end_iteration_capture(bool) {
  at::NoGradGuard no_grad;
  const std::vector<at::Tensor>& params = static_parameters();
  for (size_t i = 0; i < params.size() && i < preserved_values_.size(); ++i) {
    at::Tensor p = params[i];
    p.variable_data().copy_(preserved_values_[i]);
    p.mutable_grad() = preserved_grads_[i];
  }
  preserved_values_.clear();
  preserved_grads_.clear();
}

std::vector<at::Tensor> EmulatedGraphRunner::replay_iteration(GraphRegion& iteration) {
  return run_as_replay(iteration);
}

}  // namespace parity::reference
