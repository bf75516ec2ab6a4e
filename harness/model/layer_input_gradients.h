#pragma once
// The gradient that arrives at each decoder layer's input, per microbatch,
// kept until the end of the step and then reduced to its fp64 L2 norm. Kept by
// reference on purpose: a gradient a graphed region handed back in one of its
// static buffers (the static-grad-aliasing fault, TransformerEngine's bug class)
// is overwritten by the region's next replay while it is still held here, so
// its norm at the end of the step is not the eager run's (graph_replay).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace parity {

class LayerInputGradients {
 public:
  // Registers a hook on `input` (decoder layer `layer`'s input in
  // `microbatch`) that keeps the gradient reaching it. A no-op when `input`
  // does not require grad. `self` is shared with the hook.
  static void watch(const std::shared_ptr<LayerInputGradients>& self, const at::Tensor& input,
                    std::int64_t layer, std::int64_t microbatch);
  // ("decoder.layers.<i>/microbatch-<m>", fp64 L2 norm) of every kept
  // gradient, in (layer, microbatch) order; forgets them.
  std::vector<std::pair<std::string, double>> take_norms();
  void clear();

 private:
  std::mutex mutex_;  // a CUDA backward runs the hooks on another thread
  std::map<std::pair<std::int64_t, std::int64_t>, at::Tensor> kept_;
};

}  // namespace parity
