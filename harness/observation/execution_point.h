#pragma once
// Where the current thread is in a run: which step, which microbatch, which
// graph phase. The step driver sets step and microbatch, the graph runner sets
// the phase; observers (the trace recorder, metric prepare) read it to label a
// notification. Per thread, like the observation state: rank threads never share
// it; a backend that runs backward on another thread carries it there with the
// per-thread context (thread_context.h).
#include <cstdint>

#include "harness/observation/graph_phase.h"
#include "harness/observation/scope_order.h"

namespace parity {

struct ExecutionPoint {
  std::int64_t step = -1;        // -1 outside a step (e.g. graph warmup between steps)
  std::int64_t microbatch = -1;  // this rank's local microbatch index
  GraphPhase phase = GraphPhase::eager;
};

namespace detail {
inline thread_local ExecutionPoint current_execution_point;
// The innermost live ExecutionPointScope or GraphPhaseScope (the out-of-order check).
inline thread_local const void* execution_point_owner = nullptr;
}  // namespace detail

inline const ExecutionPoint& current_execution_point() { return detail::current_execution_point; }

// RAII: sets the whole point and restores the previous one on exit.
class [[nodiscard]] ExecutionPointScope {
 public:
  explicit ExecutionPointScope(ExecutionPoint point)
      : previous_(detail::current_execution_point), outer_(detail::execution_point_owner) {
    detail::current_execution_point = point;
    detail::execution_point_owner = this;
  }
  ~ExecutionPointScope() {
    if (detail::execution_point_owner != this)
      detail::scope_destroyed_out_of_order("ExecutionPointScope");
    detail::current_execution_point = previous_;
    detail::execution_point_owner = outer_;
  }
  ExecutionPointScope(const ExecutionPointScope&) = delete;
  ExecutionPointScope& operator=(const ExecutionPointScope&) = delete;

 private:
  ExecutionPoint previous_;
  const void* outer_;
};

// RAII: changes only the phase (the graph runner around warmup/capture/replay).
class [[nodiscard]] GraphPhaseScope {
 public:
  explicit GraphPhaseScope(GraphPhase phase)
      : previous_(detail::current_execution_point.phase), outer_(detail::execution_point_owner) {
    detail::current_execution_point.phase = phase;
    detail::execution_point_owner = this;
  }
  ~GraphPhaseScope() {
    if (detail::execution_point_owner != this)
      detail::scope_destroyed_out_of_order("GraphPhaseScope");
    detail::current_execution_point.phase = previous_;
    detail::execution_point_owner = outer_;
  }
  GraphPhaseScope(const GraphPhaseScope&) = delete;
  GraphPhaseScope& operator=(const GraphPhaseScope&) = delete;

 private:
  GraphPhase previous_;
  const void* outer_;
};

}  // namespace parity
