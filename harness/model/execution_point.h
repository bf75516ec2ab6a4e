#pragma once
// Where the current thread is in a run: which step, which microbatch, which
// graph phase. The step driver sets step and microbatch, the graph runner sets
// the phase; observers (the trace recorder, metric prepare) read it to label a
// notification. Per thread, like the observation state: rank threads never share it.
#include <cstdint>

#include "harness/backend/backend.h"  // GraphPhase

namespace parity {

struct ExecutionPoint {
  std::int64_t step = -1;        // -1 outside a step (e.g. graph warmup between steps)
  std::int64_t microbatch = -1;  // this rank's local microbatch index
  GraphPhase phase = GraphPhase::eager;
};

namespace detail {
inline thread_local ExecutionPoint current_execution_point;
}

inline const ExecutionPoint& current_execution_point() { return detail::current_execution_point; }

// RAII: sets the whole point and restores the previous one on exit.
class [[nodiscard]] ExecutionPointScope {
 public:
  explicit ExecutionPointScope(ExecutionPoint point) : previous_(detail::current_execution_point) {
    detail::current_execution_point = point;
  }
  ~ExecutionPointScope() { detail::current_execution_point = previous_; }
  ExecutionPointScope(const ExecutionPointScope&) = delete;
  ExecutionPointScope& operator=(const ExecutionPointScope&) = delete;

 private:
  ExecutionPoint previous_;
};

// RAII: changes only the phase (the graph runner around warmup/capture/replay).
class [[nodiscard]] GraphPhaseScope {
 public:
  explicit GraphPhaseScope(GraphPhase phase) : previous_(detail::current_execution_point.phase) {
    detail::current_execution_point.phase = phase;
  }
  ~GraphPhaseScope() { detail::current_execution_point.phase = previous_; }
  GraphPhaseScope(const GraphPhaseScope&) = delete;
  GraphPhaseScope& operator=(const GraphPhaseScope&) = delete;

 private:
  GraphPhase previous_;
};

}  // namespace parity
