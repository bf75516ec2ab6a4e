#pragma once
// Graph phases (contract.md section 3, docs/graph-phases.md): what the region a
// thread is running is doing. The graph runner (a backend's) sets it; the
// recompute rules and observers read it from the ExecutionPoint.
#include <cstdint>

namespace parity {

enum class GraphPhase : std::int8_t { eager, record, warmup, capture, replay };

}  // namespace parity
