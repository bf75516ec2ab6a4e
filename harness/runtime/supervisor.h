#pragma once
// The one supervision loop of every launch mode: watch the ranks' status
// records, stop the run at the first failure or hang, wait for (or give up
// on) the rest, and classify how each rank ended. A launch mode supplies the
// ranks as a RankSet (threads, processes). Internal to harness/runtime.
#include <chrono>
#include <memory>
#include <vector>

#include "harness/runtime/launcher.h"
#include "harness/runtime/rank_body.h"

namespace parity {

using SupervisorClock = std::chrono::steady_clock;

struct Slot {
  int rank = 0;
  RankStatusRecord* record = nullptr;
  // Keeps `record`'s storage alive as long as the slot: finish() reads the
  // records (last collective, state) after the launch mode's own state is gone.
  std::shared_ptr<const void> record_owner;
  bool done = false;
  RankEnd end;
  double end_seconds = 0;
  // For ranks still running when the supervisor stopped the run.
  bool snapshot = false;
  RankState snap_state = RankState::starting;
  double snap_age = 0;   // seconds without progress
  StepPoint snap_point;  // where its step loop was (a rank stopped late runs on)
  bool abandoned = false;
};

class RankSet {
 public:
  virtual ~RankSet() = default;
  // Marks the ranks that ended since the last call (done, end, end_seconds),
  // waiting at most `wait` for one to end.
  virtual void collect(std::vector<Slot>& slots, std::chrono::milliseconds wait) = 0;
  // The first failure or hang: ask every rank still running to stop.
  virtual void stop(std::vector<Slot>& slots) = 0;
  // How long stopped ranks get before give_up().
  virtual std::chrono::milliseconds stop_grace() const = 0;
  // The grace has passed: returns true to go on collecting (processes: after
  // SIGKILL, until reaped), false to stop waiting (threads: abandoned).
  virtual bool give_up(std::vector<Slot>& slots) = 0;
};

// Runs until every slot is done or the rank set gives up; calls `watcher`
// (when set) at every poll.
void supervise(RankSet& ranks, std::vector<Slot>& slots, double timeout_seconds,
               const RunWatcher& watcher = {});

double seconds_since(SupervisorClock::time_point t);

// The result of a supervised run: results by rank, a FailureReport iff a rank
// did not end ok.
LaunchResult finish(const std::vector<Slot>& slots, const LaunchSpec& spec,
                    const ParallelTopology& topology, SupervisorClock::time_point start);

}  // namespace parity
