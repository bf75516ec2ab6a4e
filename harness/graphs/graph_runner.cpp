#include "harness/graphs/graph_runner.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <optional>
#include <stdexcept>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"

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
    throw std::logic_error("graph region " + name +
                           " was not recorded before the graphs were created");
  }
  if (!region->captured) throw std::logic_error("graph region " + name + " was not captured");
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
      if (fault_active(CodePathFault::warmup_counted_as_step)) counted.emplace(caller);
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

void PhasedGraphRunner::run_iteration(const std::function<void()>& body) {
  const std::vector<at::Tensor>& preserved = static_parameters_;
  if (options_.mode != GraphMode::full_iteration) {
    body();
    return;
  }
  const std::int64_t it = iteration_++;
  if (it < options_.warmup) {
    body();  // eager iterations: everything observed normally, phase eager
    return;
  }
  if (it == options_.warmup) {
    // Capture: host code once, kernels "not run": contents undefined, and no
    // memory effect survives (RNG, parameters and gradients are put back).
    std::vector<at::Tensor> values, grads;
    for (const at::Tensor& p : preserved) {
      values.push_back(p.detach().clone());
      grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    }
    {
      RngPutBack rng(options_.rng);
      GraphPhaseScope capture(GraphPhase::capture);
      iteration_frozen_kinds_ = live_observation_kinds();
      begin_iteration_capture();
      try {
        body();
      } catch (...) {
        end_iteration_capture();
        throw;
      }
      end_iteration_capture();
    }
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < preserved.size(); ++i) {
      at::Tensor p = preserved[i];
      p.variable_data().copy_(values[i]);
      p.mutable_grad() = grads[i];
    }
  }
  GraphPhaseScope replay(GraphPhase::replay);
  replay_iteration(body, iteration_frozen_kinds_);
}

void PhasedGraphRunner::poison_if_capturing(const at::Tensor& t) {
  if (options_.mode == GraphMode::full_iteration && phase() == GraphPhase::capture) poison(t);
}

}  // namespace parity
