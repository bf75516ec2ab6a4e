#pragma once
// What went wrong in a failed run, one line per failed rank: the culprits first
// (ranks that threw, crashed or hung on their own), then the victims (ranks that
// merely failed or were stopped while waiting for a culprit). Each line names
// what the rank last did: its last collective and, for the model's step loop,
// its last heartbeat (step, microbatch, layer). E.g.
//   rank 3 (tp=1, cp=1, dp=0) threw: injected fault: throw-rank=3; last collective: ...
//   rank 2 (tp=0, cp=0, dp=1) hung: no progress for 3.0 s; last collective: ...;
//     last step point: step 1, microbatch 0, layer 1 (forward)
//   rank 1 (tp=1, cp=0, dp=0) crashed (signal 6 SIGABRT); last collective: ...
//   rank 0 (tp=0, cp=0, dp=0) victim, stopped by the supervisor: it was waiting in its
//     last collective; last collective: ...
// (one line each; wrapped here)
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "harness/parallel/one_line.h"
#include "harness/parallel/topology.h"
#include "harness/runtime/launch_spec.h"

namespace parity {

enum class RankFailureKind {
  threw,    // the rank program threw (detail: the message)
  crashed,  // the process died of a signal, or (threads) the simulated crash
  hung,     // no progress for longer than the timeout (detail: "no progress for 3.0 s")
  exited,   // a worker process exited with an unexpected code
  stopped,  // stopped by the supervisor after another rank failed
};
std::string_view to_string(RankFailureKind kind);

// What a rank that threw threw, by the exception's type: caught by type where
// the rank ended (rank_body.cpp) and carried as a field across threads and
// processes, so that nothing reads it back from `detail`'s text.
enum class ThrownError {
  other,                // an exception of no type below
  collective_mismatch,  // CollectiveMismatch: the group's calls differ (--check-collectives)
  collective_timeout,   // CollectiveTimeout: a collective did not complete within the timeout
};
std::string_view to_string(ThrownError thrown);  // "other", "collective_mismatch", ...

struct RankFailure {
  int rank = -1;
  RankCoordinates coordinates;
  RankFailureKind kind = RankFailureKind::threw;
  bool victim = false;          // failed only because a culprit did
  bool in_collective = false;   // it was inside its last collective when it ended
  std::string detail;           // one line
  std::string last_collective;  // CollectiveCall::describe(); "" = none yet
  // The step loop's last heartbeat (describe(StepPoint)); "" = it never beat.
  std::string last_step_point;
  double seconds = 0;  // since the launch started
  // kind threw: what it threw, and the kind an exception that names one gave
  // (harness/base/error_kind.h; "" otherwise).
  ThrownError thrown = ThrownError::other;
  std::string error_kind;
};

// One line, as above.
std::string format_rank_failure(const RankFailure& f);

struct FailureReport {
  LaunchMode launch = LaunchMode::threads;
  double timeout_seconds = 60;
  int world_size = 1;
  std::vector<RankFailure> ranks;  // culprits first (by time), then victims (by rank)
  // Threads mode only: rank threads that did not end after the run was stopped
  // and had to be left running (the CLI then exits the process at once).
  int abandoned_threads = 0;

  // "run failed: rank 3 threw, 3 victims (launch threads, world 4, timeout 60 s)"
  std::string headline() const;
  // headline + one line per rank (+ a note on abandoned threads).
  std::vector<std::string> lines() const;
  std::string text() const;  // lines joined by '\n'
  nlohmann::json to_json() const;
  // Culprits first, ordered by time (then rank); victims after, by rank.
  void sort();
};

// "signal 6 SIGABRT"
std::string describe_signal(int signal);

}  // namespace parity
