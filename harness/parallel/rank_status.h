#pragma once
// What one rank is doing, readable by the supervisor even after the rank died:
// its state, its last collective, its last step-loop point, its last progress
// time, and its last completed steps (the rows `parity run` prints while the
// run goes on). In threads mode the record lives in memory; in processes mode
// in a MAP_SHARED file mapping, so a parent can read what a crashed child had
// entered.
#include <atomic>
#include <cstdint>
#include <string>

#include "harness/parallel/collective.h"

namespace parity {

// capturing: the rank's thread is capturing a CUDA graph (host code runs, no
// collective completes): the supervisor's hang guard pauses for it; its peers'
// collective timeouts still bound a capture that never ends.
enum class RankState : std::int32_t {
  starting,
  running,
  in_collective,
  finished,
  failed,
  capturing
};
std::string_view to_string(RankState state);

// Which pass of a microbatch the step loop was in at a heartbeat.
enum class StepPass : std::int32_t { none, forward, backward };

// Where a rank's step loop last beat: the driver per microbatch, the model per
// layer (forward, and backward as each layer's gradient arrives).
struct StepPoint {
  std::int64_t step = -1;
  std::int64_t microbatch = -1;  // -1: outside the microbatch loop
  std::int64_t layer = -1;       // -1: outside the layer loop
  StepPass pass = StepPass::none;
};
// "step 0, microbatch 12, layer 1 (forward)"; fields that are -1 are left out.
std::string describe(const StepPoint& point);

// A completed training step as a rank saw it: `parity run`'s row of it.
struct StepRow {
  std::int64_t step = -1;
  double loss = 0;                // the step's loss (all-reduced: the same on every rank)
  std::int64_t observations = 0;  // recorded by this rank in the step
  double seconds = 0;             // the step's wall time on this rank
};

// One slot of a record's ring of step rows: a seqlock of its own whose version
// also names the step it holds, 2*step+1 while the row is written and 2*step+2
// once it is (0: no row yet). A reader looking for step k so tells a torn copy
// or an older row (not yet there) from a newer one (k was overwritten, lost).
// The fields are relaxed atomics (the doubles as their bits): lock-free, so
// they work across processes, and no data race for the reader to tear.
struct StepRowSlot {
  std::atomic<std::int64_t> version;
  std::atomic<std::uint64_t> loss_bits;
  std::atomic<std::int64_t> observations;
  std::atomic<std::uint64_t> seconds_bits;
};
// The last kStepRowSlots steps of a rank stay readable: at the supervisor's
// 20 ms poll a row is lost only to steps shorter than about 1 ms.
inline constexpr int kStepRowSlots = 16;

// Plain data only: it may live in shared memory between processes.
struct RankStatusRecord {
  std::atomic<std::int32_t> state;
  std::atomic<std::int64_t> progress_ms;  // steady-clock ms of the last progress
  std::atomic<std::uint32_t> version;     // seqlock over the text fields
  // The last step-loop heartbeat (point_pass none: no beat yet). Separate
  // relaxed atomics: a report read during a beat may mix two adjacent points.
  std::atomic<std::int64_t> point_step;
  std::atomic<std::int64_t> point_microbatch;
  std::atomic<std::int64_t> point_layer;
  std::atomic<std::int32_t> point_pass;
  std::atomic<std::int64_t> steps_done;  // rows published (steps 0 .. steps_done-1)
  StepRowSlot step_rows[kStepRowSlots];  // step s in slot s % kStepRowSlots
  // Per group axis (Axis's value indexes; room for axes to come): how many
  // calls this rank entered, and the axis of the last one + 1 (0: none). A
  // hang report names the members of a group that never entered a peer's call.
  std::atomic<std::int64_t> calls_entered[8];
  std::atomic<std::int32_t> last_axis_plus_one;
  std::int32_t rank;
  char last_collective[240];  // CollectiveCall::describe(), NUL-terminated
  char error[760];            // the rank's own error, when it failed
};

class RankStatus {
 public:
  explicit RankStatus(RankStatusRecord* record) : record_(record) {}
  // Puts a record into its initial state (starting, no text) for `rank`. A
  // zero-filled record (value-initialized, or a fresh mmap) is already valid.
  static void reset(RankStatusRecord* record, int rank);
  // The steady clock progress_ms() is measured on (ms since its epoch).
  static std::int64_t now_ms();
  int rank() const { return record_->rank; }
  void set_state(RankState state);
  RankState state() const;
  void enter_collective(const CollectiveCall& call);
  // A batch of point-to-point messages: the description names every message.
  void enter_collective(const std::string& description);
  void leave_collective();
  void mark_progress();
  // A step-loop heartbeat: progress, and where it was made.
  void beat(const StepPoint& point);
  void set_error(const std::string& message);
  std::string last_collective() const;  // "" when none yet
  // The calls entered on `axis` so far (the next call's sequence number).
  std::int64_t calls_entered(Axis axis) const;
  // The axis of the last collective entered; false when none yet.
  bool last_axis(Axis* axis) const;
  // The last heartbeat's point; pass none when the rank never beat.
  StepPoint last_step_point() const;
  std::string error() const;
  std::int64_t progress_ms() const;

  // The rank completed `row.step`, the step after the last one published (the
  // rank's own thread only: one writer). A few relaxed stores and fences.
  void publish_step(const StepRow& row);
  std::int64_t steps_done() const;
  enum class StepRowState { ready, not_yet, lost };
  // The row of `step`: ready (in *row), not_yet (not published, or being
  // written), or lost (the ring has moved past it; the rank's result has it).
  StepRowState read_step(std::int64_t step, StepRow* row) const;

 private:
  RankStatusRecord* record_;
};

// The status of the rank this thread runs (set by the rank body), or null.
RankStatus* rank_status_of_this_thread();

// The step loop's heartbeat: marks progress of the rank this thread runs at
// the thread's current execution point (step, microbatch) and `layer` (-1:
// none). A few relaxed atomic stores; without a rank status on this thread
// (a test, a tool, a backend's own thread) it does nothing. Long compute
// between collectives is progress only if it beats (the supervisor calls a
// rank that neither beats nor completes a collective for the timeout hung).
void step_heartbeat(StepPass pass, std::int64_t layer = -1);

// The driver's "step done": publishes `row` in the status of the rank this
// thread runs; without one (a test, a tool) it does nothing.
void publish_step_row(const StepRow& row);

// RAII: makes `status` this thread's rank status.
class [[nodiscard]] RankStatusScope {
 public:
  explicit RankStatusScope(RankStatus* status);
  ~RankStatusScope();
  RankStatusScope(const RankStatusScope&) = delete;
  RankStatusScope& operator=(const RankStatusScope&) = delete;

 private:
  RankStatus* previous_;
};

// RAII around a CUDA graph capture on this thread: the rank is `capturing`
// (the hang guard pauses) until the scope ends, then back in its previous state,
// with progress marked at both ends. Without a rank status on this thread
// (a test, a tool) it does nothing.
class [[nodiscard]] GraphCaptureScope {
 public:
  GraphCaptureScope();
  ~GraphCaptureScope();
  GraphCaptureScope(const GraphCaptureScope&) = delete;
  GraphCaptureScope& operator=(const GraphCaptureScope&) = delete;

 private:
  RankStatus* status_;
  RankState previous_ = RankState::running;
};

}  // namespace parity
