#pragma once
// What one rank is doing, readable by the supervisor even after the rank died:
// its state, its last collective, its last progress time. In threads mode the
// record lives in memory; in processes mode in a MAP_SHARED file mapping, so a
// parent can read what a crashed child had entered.
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

// Plain data only: it may live in shared memory between processes.
struct RankStatusRecord {
  std::atomic<std::int32_t> state;
  std::atomic<std::int64_t> progress_ms;  // steady-clock ms of the last progress
  std::atomic<std::uint32_t> version;     // seqlock over the text fields
  std::int32_t rank;
  char last_collective[240];              // CollectiveCall::describe(), NUL-terminated
  char error[760];                        // the rank's own error, when it failed
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
  void leave_collective();
  void mark_progress();
  void set_error(const std::string& message);
  std::string last_collective() const;  // "" when none yet
  std::string error() const;
  std::int64_t progress_ms() const;

 private:
  RankStatusRecord* record_;
};

// The status of the rank this thread runs (set by the rank body), or null.
RankStatus* rank_status_of_this_thread();

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
