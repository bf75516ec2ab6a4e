// Threads mode: one thread per rank in this process, an in-process store.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "harness/runtime/launch_modes.h"

namespace parity {
namespace {

// What the rank threads share with the supervisor. Shared-owned: a thread
// that ignores both the cancel token and its collective timeout is left
// running (abandoned) and keeps this alive.
struct ThreadShared {
  std::shared_ptr<RankRun> run;
  std::unique_ptr<RankStatusRecord[]> records;
  CancelToken cancel;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<RankEnd> ends;  // by local index
  std::vector<bool> done;
  std::vector<double> end_seconds;
  SupervisorClock::time_point start;

  ThreadShared(std::shared_ptr<RankRun> r, int n, SupervisorClock::time_point t)
      : run(std::move(r)),
        records(new RankStatusRecord[n]()),
        ends(n),
        done(n, false),
        end_seconds(n, 0),
        start(t) {}
};

class RankThreads : public RankSet {
 public:
  explicit RankThreads(std::shared_ptr<ThreadShared> shared) : shared_(std::move(shared)) {}

  void collect(std::vector<Slot>& slots, std::chrono::milliseconds wait) override {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    auto newly_done = [&] {
      for (std::size_t i = 0; i < slots.size(); ++i)
        if (shared_->done[i] && !slots[i].done) return true;
      return false;
    };
    shared_->cv.wait_for(lock, wait, newly_done);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (shared_->done[i] && !slots[i].done) {
        slots[i].done = true;
        slots[i].end = shared_->ends[i];
        slots[i].end_seconds = shared_->end_seconds[i];
      }
    }
  }
  void stop(std::vector<Slot>& slots) override {
    for (Slot& s : slots)
      if (!s.done) s.end_seconds = seconds_since(shared_->start);
    shared_->cancel.cancel();
  }
  // After a stop, a rank blocked in a collective ends at the latest when its
  // collective times out (the timeout after it entered).
  std::chrono::milliseconds stop_grace() const override {
    return timeout_ms(shared_->run->spec) + std::chrono::seconds(5);
  }
  bool give_up(std::vector<Slot>&) override { return false; }

 private:
  std::shared_ptr<ThreadShared> shared_;
};

}  // namespace

std::vector<Slot> run_rank_threads(const std::shared_ptr<RankRun>& run,
                                   const std::vector<int>& ranks,
                                   SupervisorClock::time_point start) {
  const int n = static_cast<int>(ranks.size());
  auto shared = std::make_shared<ThreadShared>(run, n, start);
  std::vector<Slot> slots(n);
  for (int i = 0; i < n; ++i) {
    RankStatus::reset(&shared->records[i], ranks[i]);
    slots[i].rank = ranks[i];
    slots[i].record = &shared->records[i];
    slots[i].record_owner = shared;
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([shared, i, rank = ranks[i]] {
      RankStatus status(&shared->records[i]);
      RankEnd end = run_rank_body(*shared->run, rank, status, shared->cancel);
      {
        std::lock_guard<std::mutex> lock(shared->mutex);
        shared->ends[i] = std::move(end);
        shared->done[i] = true;
        shared->end_seconds[i] = seconds_since(shared->start);
      }
      shared->cv.notify_all();
    });
  }
  RankThreads set(shared);
  supervise(set, slots, run->spec.timeout_seconds, run->spec.watcher);
  for (int i = 0; i < n; ++i) {
    if (slots[i].done) {
      threads[i].join();
    } else {
      // Cannot happen unless a rank ignores both the cancel token and the
      // collective timeout; the shared state stays alive with the thread.
      slots[i].abandoned = true;
      threads[i].detach();
    }
  }
  return slots;
}

LaunchResult launch_threads(const LaunchSpec& spec, const RankProgram& program,
                            const nlohmann::json& arguments) {
  const auto start = SupervisorClock::now();
  single_intra_op_thread();
  auto run = std::make_shared<RankRun>(spec, arguments, program);
  std::shared_ptr<Rendezvous> rdv = Rendezvous::in_process(timeout_ms(spec));
  run->rendezvous = [rdv] { return rdv; };
  std::vector<int> ranks;
  ranks.reserve(static_cast<std::size_t>(spec.world_size()));
  for (int r = 0; r < spec.world_size(); ++r) ranks.push_back(r);
  const std::vector<Slot> slots = run_rank_threads(run, ranks, start);
  LaunchResult result = finish(slots, spec, run->topology, start);
  result.rendezvous = rdv->describe();
  return result;
}

}  // namespace parity
