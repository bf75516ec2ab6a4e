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

enum class RankState : std::int32_t { starting, running, in_collective, finished, failed };
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

}  // namespace parity
