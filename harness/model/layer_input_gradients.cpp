#include "harness/model/layer_input_gradients.h"

#include <ATen/ATen.h>

namespace parity {

void LayerInputGradients::watch(const std::shared_ptr<LayerInputGradients>& self,
                                const at::Tensor& input, std::int64_t layer,
                                std::int64_t microbatch) {
  if (!input.requires_grad()) return;
  std::weak_ptr<LayerInputGradients> weak = self;
  input.register_hook([weak, layer, microbatch](const at::Tensor& gradient) {
    if (auto kept = weak.lock()) {
      std::lock_guard<std::mutex> lock(kept->mutex_);
      kept->kept_[{layer, microbatch}] = gradient;  // the tensor itself, not a copy
    }
  });
}

std::vector<std::pair<std::string, double>> LayerInputGradients::take_norms() {
  std::lock_guard<std::mutex> lock(mutex_);
  at::NoGradGuard no_grad;
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, g] : kept_)
    out.emplace_back(
        "decoder.layers." + std::to_string(key.first) + "/microbatch-" + std::to_string(key.second),
        g.defined() ? g.to(at::kDouble).norm().item<double>() : 0.0);
  kept_.clear();
  return out;
}

void LayerInputGradients::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  kept_.clear();
}

}  // namespace parity
