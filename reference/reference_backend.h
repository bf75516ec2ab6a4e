#pragma once
// The reference backend: every op the interface's plain ATen composition
// (harness/backend/plain_ops.cpp) on CPU tensors with ATen's autograd (no fused
// kernels, no hand-written backward), CPU generators, emulated graph phases. Registered as
// "reference" (transport "gloo") by a static registrar in reference_backend.cpp.
#include "harness/backend/backend.h"

namespace parity::reference {

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  std::string_view transport_name() const override { return "gloo"; }

  std::unique_ptr<RngTracker> make_rng_tracker() const override;
  // The CPU emulation of graph phases (reference/graph_emulation.h).
  std::unique_ptr<GraphRunner> make_graph_runner() const override;
};

}  // namespace parity::reference
