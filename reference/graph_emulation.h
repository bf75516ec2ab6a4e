#pragma once
// The reference backend's CPU emulation of graph phases (docs/graph-phases.md):
//   capture - the static input buffers are allocated and filled with NaN (the
//             memory a capture leaves unwritten) and the region's host code runs
//             once on them, grad on: every tensor computed inside the region is
//             NaN before any observation sees it (kernels have not run); the
//             outputs become the static output buffers.
//   replay  - an autograd function: forward copies the inputs into the static
//             input buffers and runs the region's recorded host code under
//             no-grad with an observation scope whose callback drops everything
//             and whose kinds are the ones frozen at capture (so notifications
//             never reach the caller's observer and is_observing answers are the
//             capture-time ones), then writes the results into the static output
//             buffers without bumping their version counters (as graph kernels
//             do) and returns aliases of them (clones for the last layer, as
//             Megatron does). It saves clones of the inputs and the RNG state;
//             its backward recomputes the region from them under enable-grad,
//             suspended, and back-propagates - so a later replay overwriting the
//             static buffers never corrupts an earlier microbatch's gradients.
//   full-iteration replay - the body runs under the same dropping scope.
#include "harness/graphs/graph_runner.h"

namespace parity::reference {

class EmulatedGraphRunner final : public PhasedGraphRunner {
 protected:
  void poison(const at::Tensor& t) override;
  void capture_region(GraphRegion& region) override;
  std::vector<at::Tensor> replay_region(GraphRegion& region,
                                        const std::vector<at::Tensor>& inputs) override;
  std::vector<at::Tensor> replay_iteration(GraphRegion& iteration) override;
  void begin_iteration_capture() override;
  void end_iteration_capture(bool completed) override;

 private:
  std::vector<at::Tensor> preserved_values_, preserved_grads_;
};

}  // namespace parity::reference
