#include "reference/reference_backend.h"

#include <ATen/CPUGeneratorImpl.h>

#include "harness/backend/generator_rng_tracker.h"
#include "harness/backend/registry.h"
#include "reference/graph_emulation.h"

namespace parity::reference {
std::unique_ptr<RngTracker> ReferenceBackend::make_rng_tracker() const {
  return make_generator_rng_tracker([] { return at::make_generator<at::CPUGeneratorImpl>(0); });
}

std::unique_ptr<GraphRunner> ReferenceBackend::make_graph_runner() const {
  return std::make_unique<EmulatedGraphRunner>();
}

namespace {
const BackendRegistrar kRegistrar("reference", [] { return std::make_unique<ReferenceBackend>(); });
}  // namespace

}  // namespace parity::reference
