#include "harness/runtime/supervisor.h"

#include <cstdio>
#include <optional>

namespace parity {
namespace {

// A rank in state `starting` (process start-up, the start-up barrier, group
// creation) is given kStartupGraceSeconds (rank_body.h) longer than the
// timeout before it counts as hung: ranks waiting at the barrier beat, group
// creation fails by the Gloo timeout first, so only a rank that never began
// gets that far.
constexpr auto kPoll = std::chrono::milliseconds(20);

std::string fixed1(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

double age_seconds(const RankStatusRecord* record) {
  RankStatus s(const_cast<RankStatusRecord*>(record));
  return static_cast<double>(RankStatus::now_ms() - s.progress_ms()) / 1000.0;
}

bool is_stale(const Slot& s, double timeout) {
  RankStatus st(s.record);
  // A rank capturing a CUDA graph runs host code only: the guard pauses for it.
  if (st.state() == RankState::capturing) return false;
  const double limit = st.state() == RankState::starting ? timeout + kStartupGraceSeconds : timeout;
  return age_seconds(s.record) > limit;
}

void take_snapshots(std::vector<Slot>& slots) {
  for (Slot& s : slots) {
    if (s.done) continue;
    s.snapshot = true;
    s.snap_state = RankStatus(s.record).state();
    s.snap_age = age_seconds(s.record);
    s.snap_point = RankStatus(s.record).last_step_point();
  }
}

RankFailure classify_rank(const Slot& s, const ParallelTopology& topology, double timeout) {
  RankStatus status(s.record);
  RankFailure f;
  f.rank = s.rank;
  f.coordinates = topology.coordinates(s.rank);
  f.last_collective = status.last_collective();
  const StepPoint point = s.snapshot ? s.snap_point : status.last_step_point();
  if (point.pass != StepPass::none) f.last_step_point = describe(point);
  f.seconds = s.end_seconds;
  f.in_collective = s.end.in_collective;
  const Outcome outcome = s.done ? s.end.outcome : Outcome::cancelled;  // abandoned: as stopped
  switch (outcome) {
    case Outcome::crashed:
      f.kind = RankFailureKind::crashed;
      f.detail = s.end.signal ? describe_signal(s.end.signal)
                              : "simulated in threads mode: the rank thread ended without a result";
      break;
    case Outcome::threw:
      f.kind = RankFailureKind::threw;
      f.detail = s.end.error;
      f.thrown = s.end.thrown;
      f.error_kind = s.end.error_kind;
      // Failing inside a collective (peer gone, timeout) is what a victim does;
      // a fingerprint mismatch is a culprit.
      f.victim = s.end.in_collective && s.end.thrown != ThrownError::collective_mismatch;
      break;
    case Outcome::exited:
      f.kind = RankFailureKind::exited;
      f.detail = "exit code " + std::to_string(s.end.exit_code) +
                 (s.end.error.empty() ? std::string(" without a result") : ": " + s.end.error);
      break;
    case Outcome::cancelled:
    case Outcome::killed:
    case Outcome::running:
    case Outcome::ok: {
      const bool in_coll =
          s.snapshot ? s.snap_state == RankState::in_collective : s.end.in_collective;
      f.in_collective = in_coll;
      const double age = s.snapshot ? s.snap_age : 0;
      if (s.snapshot && !in_coll && age >= 0.5 * timeout) {
        f.kind = RankFailureKind::hung;
        f.detail = "no progress for " + fixed1(age) + " s";
      } else if (s.snapshot && in_coll && age >= timeout) {
        f.kind = RankFailureKind::hung;
        f.detail = "no progress for " + fixed1(age) + " s inside its last collective";
        f.victim = true;
      } else {
        f.kind = RankFailureKind::stopped;
        f.detail = in_coll ? "it was waiting in its last collective" : "it was still running";
        f.victim = true;
      }
      if (s.abandoned) f.detail += " (its thread did not stop and was left running)";
      break;
    }
  }
  if (s.end.outcome == Outcome::killed && f.kind == RankFailureKind::stopped)
    f.detail += " (" + describe_signal(s.end.signal) + ")";
  return f;
}

// A rank that ended inside a collective waited for the members of its group
// that never entered that call (its sequence number): named in its line. The
// end of such a chain, a rank waited for that waits for no one, is a culprit,
// not a victim. Ranks that disagree about which collectives run (one skipped
// a call) wait for each other in different groups: each line names the other.
void name_the_awaited(FailureReport& report, const std::vector<Slot>& slots,
                      const ParallelTopology& topology) {
  const std::size_t world = static_cast<std::size_t>(topology.world_size());
  std::vector<const Slot*> by_rank(world, nullptr);
  for (const Slot& s : slots) by_rank[static_cast<std::size_t>(s.rank)] = &s;
  std::vector<bool> awaited(world, false), waits(world, false);
  for (RankFailure& f : report.ranks) {
    const Slot* mine = by_rank[static_cast<std::size_t>(f.rank)];
    Axis axis = Axis::world;
    if (!f.in_collective || !mine || !RankStatus(mine->record).last_axis(&axis)) continue;
    const std::int64_t call = RankStatus(mine->record).calls_entered(axis) - 1;
    std::string names;
    for (int peer : topology.group_ranks(f.rank, axis)) {
      const Slot* theirs = by_rank[static_cast<std::size_t>(peer)];
      if (peer == f.rank || !theirs) continue;
      const std::int64_t entered = RankStatus(theirs->record).calls_entered(axis);
      if (entered > call) continue;
      awaited[static_cast<std::size_t>(peer)] = true;
      names += (names.empty() ? "" : ", ") + std::string("rank ") + std::to_string(peer) +
               (entered == 0 ? " (it entered none)"
                             : " (it entered #0-#" + std::to_string(entered - 1) + " only)");
    }
    if (names.empty()) continue;
    waits[static_cast<std::size_t>(f.rank)] = true;
    f.detail += "; waiting in #" + std::to_string(call) + " on " + std::string(to_string(axis)) +
                " for " + names;
  }
  for (RankFailure& f : report.ranks) {
    const auto r = static_cast<std::size_t>(f.rank);
    if (awaited[r] && !waits[r]) f.victim = false;
  }
}

FailureReport classify(const std::vector<Slot>& slots, const LaunchSpec& spec,
                       const ParallelTopology& topology) {
  FailureReport report;
  report.launch = spec.mode;
  report.timeout_seconds = spec.timeout_seconds;
  report.world_size = topology.world_size();
  for (const Slot& s : slots)
    if (!(s.done && s.end.outcome == Outcome::ok))
      report.ranks.push_back(classify_rank(s, topology, spec.timeout_seconds));
  name_the_awaited(report, slots, topology);
  bool any_culprit = false;
  for (const RankFailure& f : report.ranks) any_culprit = any_culprit || !f.victim;
  // With no culprit but ranks whose collective failed (a timeout, or a peer's
  // connection closed by that peer's own timeout), the ranks they waited for
  // are those stopped outside any collective: still computing, or stalled
  // just short of the hang limit (which of the two fired first is a race).
  if (!any_culprit) {
    bool collective_failed = false;
    for (const RankFailure& f : report.ranks)
      collective_failed =
          collective_failed || (f.kind == RankFailureKind::threw && f.in_collective);
    for (RankFailure& f : report.ranks) {
      if (collective_failed && f.kind == RankFailureKind::stopped && !f.in_collective) {
        f.victim = false;
        const std::string running = "it was still running";
        if (f.detail.rfind(running, 0) == 0)
          f.detail.insert(running.size(), ", outside the collective its peers failed in");
        any_culprit = true;
      }
    }
  }
  // Still no culprit (e.g. every rank stuck in mismatched collectives): nobody
  // is a victim; report them all as they are.
  if (!any_culprit)
    for (RankFailure& f : report.ranks) f.victim = false;
  for (const Slot& s : slots) report.abandoned_threads += s.abandoned ? 1 : 0;
  report.sort();
  return report;
}

}  // namespace

double seconds_since(SupervisorClock::time_point t) {
  return std::chrono::duration<double>(SupervisorClock::now() - t).count();
}

void supervise(RankSet& ranks, std::vector<Slot>& slots, double timeout,
               const RunWatcher& watcher) {
  std::optional<SupervisorClock::time_point> stopped_at;
  bool gave_up = false;
  bool watching = static_cast<bool>(watcher);
  std::vector<RankStatus> statuses;
  statuses.reserve(slots.size());
  for (const Slot& s : slots) statuses.emplace_back(s.record);
  while (true) {
    ranks.collect(slots, kPoll);
    if (watching) {
      try {
        watcher(statuses);
      } catch (...) {
        watching = false;  // the run goes on unwatched
      }
    }
    bool all_done = true, any_failed = false, hang = false;
    for (const Slot& s : slots) {
      all_done = all_done && s.done;
      any_failed = any_failed || (s.done && s.end.outcome != Outcome::ok);
      hang = hang || (!s.done && is_stale(s, timeout));
    }
    if (all_done) return;
    if (!stopped_at) {
      if (any_failed || hang) {
        take_snapshots(slots);
        ranks.stop(slots);
        stopped_at = SupervisorClock::now();
      }
    } else if (!gave_up && SupervisorClock::now() - *stopped_at > ranks.stop_grace()) {
      gave_up = true;
      if (!ranks.give_up(slots)) return;
    }
  }
}

LaunchResult finish(const std::vector<Slot>& slots, const LaunchSpec& spec,
                    const ParallelTopology& topology, SupervisorClock::time_point start) {
  LaunchResult result;
  result.world_size = topology.world_size();
  result.results.assign(result.world_size, nullptr);
  bool ok = true;
  for (const Slot& s : slots) {
    result.local_ranks.push_back(s.rank);
    if (s.done && s.end.outcome == Outcome::ok)
      result.results[s.rank] = s.end.result;
    else
      ok = false;
  }
  if (!ok) result.failure = classify(slots, spec, topology);
  result.wall_seconds = seconds_since(start);
  return result;
}

}  // namespace parity
