#include "harness/model/weight_gradient_sites.h"

#include <ATen/ATen.h>

#include <string>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/thread_context.h"

PARITY_USES_FAULT(wgrad_hook_per_graph_task);

namespace parity {

struct WeightGradientSites::Site : ObservationOwner {
  std::string name;
  // For the zeros when no gradient arrived (not the tensor: its hook holds the site).
  std::vector<std::int64_t> sizes;
  at::TensorOptions options;
  OptionalDim tp_dim;
  at::Tensor arrived;  // the sum of this backward's hook arguments
  // Fault wgrad-hook-per-graph-task: each firing is notified as the gradient.
  bool notify_each_firing = false;
  OriginContext origin;

  const std::string& canonical_name() const override { return name; }
  void notify(const at::Tensor& gradient) const {
    observe_tensor(*this, "wgrad", SourceKind::weight_gradient, gradient, tp_dim);
  }
  void arrive(const at::Tensor& gradient) {
    at::NoGradGuard no_grad;
    if (notify_each_firing) {
      OriginContextScope context(origin);  // a CUDA backward runs on another thread
      notify(gradient.detach().clone());
      return;
    }
    arrived = arrived.defined() ? arrived.add(gradient) : gradient.detach().clone();
  }
};

WeightGradientSites::WeightGradientSites(const std::vector<Parameter>& parameters) {
  const bool each_firing = fault_active(fault_wgrad_hook_per_graph_task);
  for (const Parameter& p : parameters) {
    auto site = std::make_shared<Site>();
    site->name = p.name;
    site->sizes = p.value.sizes().vec();
    site->options = p.value.options().requires_grad(false);
    if (!p.shard.replicated()) site->tp_dim = p.shard.dim;
    site->notify_each_firing = each_firing;
    // The hook shares its site: a parameter outliving the model keeps it alive.
    p.value.register_hook([site](const at::Tensor& gradient) { site->arrive(gradient); });
    sites_.push_back(std::move(site));
  }
}

WeightGradientSites::~WeightGradientSites() = default;

void WeightGradientSites::backward_starts() {
  const OriginContext origin = capture_origin_context();
  for (const auto& site : sites_) site->origin = origin;
}

void WeightGradientSites::deliver(std::size_t first, std::size_t count) {
  at::NoGradGuard no_grad;
  for (std::size_t i = first; i < first + count && i < sites_.size(); ++i) {
    const auto& site = sites_[i];
    // Fault wgrad-hook-per-graph-task: the hooks notified already.
    if (!site->notify_each_firing)
      site->notify(site->arrived.defined() ? site->arrived : at::zeros(site->sizes, site->options));
    site->arrived = at::Tensor();
  }
}

void WeightGradientSites::clear() {
  for (const auto& site : sites_) site->arrived = at::Tensor();
}

}  // namespace parity
