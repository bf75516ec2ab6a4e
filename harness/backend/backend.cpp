#include "harness/backend/backend.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace parity {

std::vector<at::Tensor> EagerGraphRunner::run_region(const std::string&, const RegionFn& fn,
                                                     const std::vector<at::Tensor>& inputs, bool) {
  return fn(inputs);
}

std::vector<at::Tensor> EagerGraphRunner::run_iteration(const RegionFn& body,
                                                        const std::vector<at::Tensor>& inputs) {
  return body(inputs);
}

at::Device Backend::device() const { return at::Device(at::kCPU); }

}  // namespace parity
