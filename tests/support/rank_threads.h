#pragma once
// Test helper: runs one thread per rank of a topology over one in-process
// rendezvous and the "gloo" transport. Rank threads never touch gtest: they
// record failures and exceptions, which the test asserts after every thread
// has joined (pitfalls.md).
#include <ATen/Parallel.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "harness/model/parallel_context.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/process_groups.h"
#include "harness/parallel/rank_status.h"
#include "harness/parallel/rendezvous.h"
#include "harness/parallel/topology.h"

namespace parity::testing {

// Collects a rank's failed expectations as text.
struct Expect {
  std::vector<std::string> failures;
  void operator()(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
};

struct RankOutcome {
  std::string error;       // what() of the exception the rank ended with, if any
  std::string error_kind;  // "CollectiveMismatch", "CollectiveTimeout", ...
  std::vector<std::string> failures;
  double call_seconds = 0;  // free for the test's own timing
};

inline std::string kind_of(const std::exception& e) {
  if (dynamic_cast<const CollectiveMismatch*>(&e)) return "CollectiveMismatch";
  if (dynamic_cast<const CollectiveTimeout*>(&e)) return "CollectiveTimeout";
  if (dynamic_cast<const CollectiveError*>(&e)) return "CollectiveError";
  if (dynamic_cast<const RendezvousError*>(&e)) return "RendezvousError";
  if (dynamic_cast<const std::invalid_argument*>(&e)) return "invalid_argument";
  return "other";
}

// Every rank waits here before its groups are destroyed, so one rank's
// teardown never turns another rank's timeout into "connection closed".
class Latch {
 public:
  explicit Latch(int n) : left_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    if (--left_ == 0) cv_.notify_all();
    cv_.wait(lock, [&] { return left_ <= 0; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int left_;
};

struct ThreadRun {
  std::vector<RankOutcome> outcomes;
  std::unique_ptr<RankStatusRecord[]> records;
  double setup_seconds = 0;  // slowest rank's make_rank_groups
  double total_seconds = 0;

  // Every rank's error and failed expectation, one per line ("" when none).
  std::string report() const {
    std::ostringstream out;
    for (std::size_t r = 0; r < outcomes.size(); ++r) {
      if (!outcomes[r].error.empty())
        out << "rank " << r << " threw " << outcomes[r].error_kind << ": " << outcomes[r].error
            << "\n";
      for (const auto& f : outcomes[r].failures) out << "rank " << r << ": " << f << "\n";
    }
    return out.str();
  }
};

// fn(int rank, RankGroups& groups, RankStatus& status, Expect& expect, RankOutcome& out)
template <typename Fn>
ThreadRun run_thread_ranks(const ParallelTopology& topology, const GroupOptions& options, Fn fn,
                           std::shared_ptr<Rendezvous> rendezvous = nullptr) {
  const int n = topology.world_size();
  if (!rendezvous) rendezvous = Rendezvous::in_process(std::chrono::seconds(30));
  ThreadRun run;
  run.outcomes.resize(n);
  run.records.reset(new RankStatusRecord[n]());
  std::vector<double> setup(n, 0.0);
  auto factory = make_transport_factory("gloo");
  Latch before_teardown(n);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);
      RankOutcome& out = run.outcomes[r];
      RankStatus::reset(&run.records[r], r);
      RankStatus status(&run.records[r]);
      Expect expect;
      bool arrived = false;
      try {
        const auto s0 = std::chrono::steady_clock::now();
        RankGroups groups = make_rank_groups(topology, r, *rendezvous, *factory, &status, options);
        setup[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
        status.set_state(RankState::running);
        try {
          fn(r, groups, status, expect, out);
        } catch (const std::exception& e) {
          out.error = e.what();
          out.error_kind = kind_of(e);
        }
        arrived = true;
        before_teardown.arrive_and_wait();
      } catch (const std::exception& e) {
        out.error = e.what();
        out.error_kind = kind_of(e);
      }
      if (!arrived) before_teardown.arrive_and_wait();
      out.failures = std::move(expect.failures);
    });
  }
  for (auto& t : threads) t.join();
  run.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (double s : setup) run.setup_seconds = std::max(run.setup_seconds, s);
  return run;
}

// What run_model_ranks returns: each rank's result, default-constructed where
// the rank threw.
template <typename Result>
struct RankResults {
  std::vector<Result> results;
  ThreadRun threads;  // each rank's exception

  // Every rank's exception, one per line ("" when none threw).
  std::string report() const { return threads.report(); }
};

// The model tests' runner: fn(ParallelContext) -> Result on one thread per rank
// of `topology`, over an in-process rendezvous and "gloo" with a 30 s timeout.
template <typename Fn>
auto run_model_ranks(const ParallelTopology& topology, Fn fn) {
  RankResults<std::invoke_result_t<Fn&, ParallelContext>> out;
  out.results.resize(topology.world_size());
  GroupOptions options;
  options.timeout = std::chrono::seconds(30);
  out.threads = run_thread_ranks(
      topology, options, [&](int rank, RankGroups& groups, RankStatus&, Expect&, RankOutcome&) {
        out.results[rank] = fn(ParallelContext::from(groups));
      });
  return out;
}

}  // namespace parity::testing
