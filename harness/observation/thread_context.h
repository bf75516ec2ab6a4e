#pragma once
// The per-thread context: everything a rank thread's model code reads from
// thread-local state, as one value a backend can carry to another thread.
//
//   observation state  - the active observer and the suspension (tensor_observation.h)
//   execution point    - step, microbatch, graph phase (execution_point.h)
//   code-path faults   - the switched-on faults (harness/faults/code_path_faults.h)
//   recompute log      - where checkpoint executions are recorded (recompute/checkpoint.h)
//
// ATen's CPU autograd runs backward on the calling thread, so the reference
// needs none of this. A backend whose backward (or any part of the step) runs
// on a worker thread captures the context on the rank thread and reinstalls it
// on the worker for the duration of that work:
//
//   ThreadContext ctx = capture_thread_context();           // rank thread
//   worker.run([&] { ThreadContextScope here(ctx); ... });  // worker thread
//
// The captured context points at scopes that live on the capturing thread (the
// observer's callback above all): the capturing thread must keep them alive,
// i.e. wait for the worker, as a backward call does. Storage stays where each
// floor keeps it (the observation gate remains one thread-local load and a
// branch); this header only bundles it.
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"

namespace parity {

struct RecomputeEvent;  // harness/recompute/checkpoint.h (a floor above; only the pointer here)
using RecomputeLog = std::vector<RecomputeEvent>;

class ThreadContext {
 public:
  // The context of a thread that never installed anything.
  ThreadContext() = default;

  const ExecutionPoint& execution_point() const { return point_; }
  std::uint64_t code_path_faults() const { return code_path_faults_; }
  RecomputeLog* recompute_log() const { return recompute_log_; }
  bool suspended() const { return observation_.suspended; }
  bool observing() const { return observation_.active != nullptr; }

 private:
  friend ThreadContext capture_thread_context();
  friend class ThreadContextScope;
  detail::ObservationState observation_;
  ExecutionPoint point_;
  const void* point_owner_ = nullptr;
  std::uint64_t code_path_faults_ = 0;
  const void* code_path_fault_owner_ = nullptr;
  RecomputeLog* recompute_log_ = nullptr;
  const void* recompute_log_owner_ = nullptr;
};

// This thread's context now.
ThreadContext capture_thread_context();

// RAII: installs `context` on this thread and puts the thread's own back on
// exit. A scope opened inside it and still alive at its exit is an out-of-order
// destruction (aborts with a message, scope_order.h).
class [[nodiscard]] ThreadContextScope {
 public:
  explicit ThreadContextScope(const ThreadContext& context);
  ~ThreadContextScope();
  ThreadContextScope(const ThreadContextScope&) = delete;
  ThreadContextScope& operator=(const ThreadContextScope&) = delete;

 private:
  static void install(const ThreadContext& context);
  ThreadContext installed_;
  ThreadContext previous_;
};

// The context of the thread that set up work which autograd may continue on
// another thread: a custom autograd function captures it in its forward and
// opens an OriginContextScope in its backward. On the capturing thread (the CPU
// engine runs backward there) the scope does nothing; on another thread (the
// CUDA engine's device thread, shared by every thread rank on that device) it
// installs the captured context for the duration of the backward. The
// capturing thread waits in its backward call meanwhile, so what the context
// points at (the step's observer) is alive.
struct OriginContext {
  ThreadContext context;
  std::thread::id thread;
};
OriginContext capture_origin_context();

class [[nodiscard]] OriginContextScope {
 public:
  explicit OriginContextScope(const OriginContext& origin);
  bool reinstalled() const { return scope_.has_value(); }

 private:
  std::optional<ThreadContextScope> scope_;
};

namespace detail {
// The recompute log of this thread and its owner (RecomputeLogScope).
RecomputeLog*& thread_recompute_log();
const void*& thread_recompute_log_owner();
}  // namespace detail

}  // namespace parity
