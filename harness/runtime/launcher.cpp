#include "harness/runtime/launcher.h"

#include "harness/base/files.h"
#include "harness/parallel/code_path_faults.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "harness/parallel/communicator.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/rendezvous.h"
#include "harness/runtime/self_check.h"

namespace parity {
namespace {

using Clock = std::chrono::steady_clock;
using RendezvousMaker = std::function<std::shared_ptr<Rendezvous>()>;

// A rank in state `starting` (process start-up, group creation) is given this
// much longer than the timeout before it counts as hung: the store's own
// timeout (= the run timeout) fails a rendezvous that never completes first.
constexpr double kStartupGraceSeconds = 10.0;
constexpr auto kPoll = std::chrono::milliseconds(20);
// After SIGTERM, how long a worker gets before SIGKILL.
constexpr auto kKillGrace = std::chrono::milliseconds(1000);

std::chrono::milliseconds timeout_ms(const RunConfig& c) {
  return std::chrono::milliseconds(static_cast<long long>(c.timeout * 1000.0 + 0.5));
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fixed1(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

// ---------------------------------------------------------------- programs

struct ProgramRegistry {
  std::mutex mutex;
  std::map<std::string, RankProgram> programs;
};

ProgramRegistry& programs() {
  static ProgramRegistry* r = [] {
    auto* reg = new ProgramRegistry;
    reg->programs[kSelfCheckProgram] = run_self_check;
    return reg;
  }();
  return *r;
}

RankProgram find_program(const std::string& name) {
  ProgramRegistry& r = programs();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.programs.find(name);
  if (it != r.programs.end()) return it->second;
  std::string known;
  for (const auto& [n, p] : r.programs) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown rank program \"" + name + "\" (known: " + known + ")");
}

void single_intra_op_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::set_num_threads(1);
    // OpenBLAS (Debian's libblas alternative) keeps its own pthread pool, which
    // at::set_num_threads does not limit: with one rank per thread every rank's
    // GEMMs would start BLAS threads that spin against each other (measured:
    // 2-3x slower steps at 2 thread ranks on 2 cores). Limit it too when present.
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
      set(1);
  });
}

// A peer that died closes its sockets; a write to them must fail the
// collective (EPIPE), not kill this process with SIGPIPE and make a victim
// look like a crashed culprit.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { ::signal(SIGPIPE, SIG_IGN); });
}

// ---------------------------------------------------------------- one rank

enum class Outcome { running, ok, threw, crashed, cancelled, exited, killed };

struct RankEnd {
  Outcome outcome = Outcome::running;
  std::string error;
  bool in_collective = false;
  bool mismatch = false;
  nlohmann::json result;
  int signal = 0;     // processes: the signal that ended the worker
  int exit_code = 0;  // processes: an unexpected exit code
};

// Every rank's result, on every rank, over the world group (env mode): the
// JSON text as float64 codes, padded to the longest.
nlohmann::json gather_results(Communicator& world, const nlohmann::json& mine) {
  const std::string text = mine.dump();
  at::Tensor len = at::full({1}, static_cast<double>(text.size()), at::kDouble);
  at::Tensor lens = world.all_gather(len, 0);
  const auto max_len = static_cast<std::int64_t>(lens.max().item<double>());
  at::Tensor codes = at::zeros({1, std::max<std::int64_t>(max_len, 1)}, at::kDouble);
  auto acc = codes.accessor<double, 2>();
  for (std::size_t i = 0; i < text.size(); ++i)
    acc[0][static_cast<std::int64_t>(i)] = static_cast<unsigned char>(text[i]);
  at::Tensor all = world.all_gather(codes, 0);
  auto all_acc = all.accessor<double, 2>();
  nlohmann::json out = nlohmann::json::array();
  for (std::int64_t r = 0; r < all.size(0); ++r) {
    std::string s(static_cast<std::size_t>(lens[r].item<double>()), '\0');
    for (std::size_t i = 0; i < s.size(); ++i)
      s[i] = static_cast<char>(static_cast<int>(all_acc[r][static_cast<std::int64_t>(i)]));
    out.push_back(nlohmann::json::parse(s));
  }
  return out;
}

RankEnd run_rank_body(const RunConfig& config, const ParallelTopology& topology, int rank,
                      const RendezvousMaker& rendezvous, const std::string& transport,
                      RankStatus& status, const FaultPlan& faults, const CancelToken& cancel,
                      bool own_process, const RankProgram& program, bool gather) {
  RankEnd end;
  auto failed = [&](const std::string& message, bool mismatch) {
    end.outcome = Outcome::threw;
    end.error = one_line(message);
    end.mismatch = mismatch;
    // The communicator leaves a collective only when it completed.
    end.in_collective = status.state() == RankState::in_collective;
    status.set_error(end.error);
    status.set_state(RankState::failed);
  };
  // The groups outlive the handlers below: tearing them down closes this rank's
  // sockets, which is how its peers learn it is gone. The failure must be in
  // the status record before that, or a peer's "connection closed" can reach
  // the supervisor first and the culprit looks like a victim.
  std::shared_ptr<Rendezvous> rdv;
  std::optional<RankGroups> groups;
  // The run's code-path faults hold on this rank thread, for its collectives too.
  const CodePathFaultScope code_path_faults(faults);
  try {
    status.set_state(RankState::starting);
    rdv = rendezvous();
    std::unique_ptr<TransportFactory> factory = make_transport_factory(transport);
    GroupOptions options;
    options.timeout = timeout_ms(config);
    options.communicator.check_collectives = config.check_collectives;
    groups.emplace(make_rank_groups(topology, rank, *rdv, *factory, &status, options));
    status.set_state(RankState::running);
    RankContext ctx{config, topology, rank, topology.coordinates(rank), *groups,
                    status, faults,   cancel, own_process};
    nlohmann::json result = program(ctx);
    if (gather) result = gather_results(groups->get(Axis::world), result);
    // Exit barrier (as dist.barrier() before destroy_process_group): a rank
    // whose program issued no collective could otherwise tear its groups down
    // while a peer is still completing its handshake with it ("Connection
    // closed by peer" in the peer's group creation).
    if (groups->get(Axis::world).size() > 1) groups->get(Axis::world).barrier();
    status.set_state(RankState::finished);
    end.outcome = Outcome::ok;
    end.result = std::move(result);
  } catch (const SimulatedCrash&) {
    end.outcome = Outcome::crashed;
    end.in_collective = status.state() == RankState::in_collective;
    status.set_state(RankState::failed);
  } catch (const RankCancelled&) {
    end.outcome = Outcome::cancelled;
    end.in_collective = status.state() == RankState::in_collective;
  } catch (const CollectiveMismatch& e) {
    failed(e.what(), true);
  } catch (const std::exception& e) {
    failed(e.what(), false);
  } catch (...) {
    failed("unknown exception (not a std::exception)", false);
  }
  return end;
}

// ---------------------------------------------------------------- supervision

struct Slot {
  int rank = 0;
  RankStatusRecord* record = nullptr;
  bool done = false;
  RankEnd end;
  double end_seconds = 0;
  // For ranks still running when the supervisor stopped the run.
  bool snapshot = false;
  RankState snap_state = RankState::starting;
  double snap_age = 0;  // seconds without progress
  bool abandoned = false;
};

double age_seconds(const RankStatusRecord* record) {
  RankStatus s(const_cast<RankStatusRecord*>(record));
  return static_cast<double>(RankStatus::now_ms() - s.progress_ms()) / 1000.0;
}

bool is_stale(const Slot& s, double timeout) {
  RankStatus st(s.record);
  const double limit = st.state() == RankState::starting ? timeout + kStartupGraceSeconds : timeout;
  return age_seconds(s.record) > limit;
}

void take_snapshots(std::vector<Slot>& slots) {
  for (Slot& s : slots) {
    if (s.done) continue;
    s.snapshot = true;
    s.snap_state = RankStatus(s.record).state();
    s.snap_age = age_seconds(s.record);
  }
}

FailureReport classify(const std::vector<Slot>& slots, const RunConfig& config,
                       const ParallelTopology& topology) {
  FailureReport report;
  report.launch = config.launch;
  report.timeout_seconds = config.timeout;
  report.world_size = topology.world_size();
  const double timeout = config.timeout;
  for (const Slot& s : slots) {
    if (s.done && s.end.outcome == Outcome::ok) continue;
    RankStatus status(s.record);
    RankFailure f;
    f.rank = s.rank;
    f.coordinates = topology.coordinates(s.rank);
    f.last_collective = status.last_collective();
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
        // Failing inside a collective (peer gone, timeout) is what a victim does;
        // a fingerprint mismatch is a culprit.
        f.victim = s.end.in_collective && !s.end.mismatch;
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
        const bool in_coll = s.snapshot ? s.snap_state == RankState::in_collective : s.end.in_collective;
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
    report.ranks.push_back(std::move(f));
  }
  // With no culprit (e.g. every rank stuck in mismatched collectives), nobody
  // is a victim: report them all as they are.
  bool any_culprit = false;
  for (const RankFailure& f : report.ranks) any_culprit = any_culprit || !f.victim;
  if (!any_culprit)
    for (RankFailure& f : report.ranks) f.victim = false;
  for (const Slot& s : slots) report.abandoned_threads += s.abandoned ? 1 : 0;
  report.sort();
  return report;
}

// ---------------------------------------------------------------- threads / env

struct ThreadRun {
  RunConfig config;
  ParallelTopology topology;
  FaultPlan faults;
  RankProgram program;
  RendezvousMaker rendezvous;
  std::string transport;
  bool own_process = false;
  bool gather = false;
  std::unique_ptr<RankStatusRecord[]> records;
  CancelToken cancel;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<RankEnd> ends;   // by local index
  std::vector<bool> done;
  std::vector<double> end_seconds;
  Clock::time_point start;

  ThreadRun(const RunConfig& c, int n)
      : config(c), topology(c.tp, c.cp, c.dp), records(new RankStatusRecord[n]()), ends(n),
        done(n, false), end_seconds(n, 0) {}
};

// Runs `ranks` as threads of this process and supervises them.
std::vector<Slot> run_threads(const std::shared_ptr<ThreadRun>& run, const std::vector<int>& ranks) {
  const int n = static_cast<int>(ranks.size());
  std::vector<Slot> slots(n);
  for (int i = 0; i < n; ++i) {
    RankStatus::reset(&run->records[i], ranks[i]);
    slots[i].rank = ranks[i];
    slots[i].record = &run->records[i];
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([run, i, rank = ranks[i]] {
      RankStatus status(&run->records[i]);
      RankEnd end = run_rank_body(run->config, run->topology, rank, run->rendezvous,
                                  run->transport, status, run->faults, run->cancel,
                                  run->own_process, run->program, run->gather);
      {
        std::lock_guard<std::mutex> lock(run->mutex);
        run->ends[i] = std::move(end);
        run->done[i] = true;
        run->end_seconds[i] = seconds_since(run->start);
      }
      run->cv.notify_all();
    });
  }

  const double timeout = run->config.timeout;
  std::optional<Clock::time_point> stopped_at;
  // After a stop, a rank blocked in a collective ends at the latest when its
  // collective times out (the timeout after it entered).
  const auto stop_bound = std::chrono::milliseconds(static_cast<long long>(timeout * 1000)) +
                          std::chrono::seconds(5);
  std::unique_lock<std::mutex> lock(run->mutex);
  while (true) {
    bool all_done = true, any_failed = false;
    for (int i = 0; i < n; ++i) {
      if (run->done[i] && !slots[i].done) {
        slots[i].done = true;
        slots[i].end = run->ends[i];
        slots[i].end_seconds = run->end_seconds[i];
      }
      all_done = all_done && slots[i].done;
      any_failed = any_failed || (slots[i].done && slots[i].end.outcome != Outcome::ok);
    }
    if (all_done) break;
    if (!stopped_at) {
      bool hang = false;
      for (const Slot& s : slots) hang = hang || (!s.done && is_stale(s, timeout));
      if (any_failed || hang) {
        take_snapshots(slots);
        for (Slot& s : slots)
          if (!s.done) s.end_seconds = seconds_since(run->start);
        run->cancel.cancel();
        stopped_at = Clock::now();
      }
    } else if (Clock::now() - *stopped_at > stop_bound) {
      break;
    }
    run->cv.wait_for(lock, kPoll);
  }
  lock.unlock();
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

LaunchResult finish(std::vector<Slot>& slots, const RunConfig& config,
                    const ParallelTopology& topology, Clock::time_point start) {
  LaunchResult result;
  result.world_size = topology.world_size();
  result.results.assign(result.world_size, nullptr);
  bool ok = true;
  for (Slot& s : slots) {
    result.local_ranks.push_back(s.rank);
    if (s.done && s.end.outcome == Outcome::ok) result.results[s.rank] = s.end.result;
    else ok = false;
  }
  if (!ok) result.failure = classify(slots, config, topology);
  result.wall_seconds = seconds_since(start);
  return result;
}

LaunchResult launch_threads(const RunConfig& config, const RankProgram& program,
                            const LaunchOptions& options) {
  const auto start = Clock::now();
  single_intra_op_thread();
  const int world = config.world_size();
  auto run = std::make_shared<ThreadRun>(config, world);
  run->faults = FaultPlan::from_specs(config.inject, world);
  run->program = program;
  run->transport = options.transport;
  std::shared_ptr<Rendezvous> rdv = Rendezvous::in_process(timeout_ms(config));
  run->rendezvous = [rdv] { return rdv; };
  run->start = start;
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  std::vector<Slot> slots = run_threads(run, ranks);
  LaunchResult result = finish(slots, config, run->topology, start);
  result.rendezvous = rdv->describe();
  return result;
}

LaunchResult launch_env(const RunConfig& config, const RankProgram& program,
                        const LaunchOptions& options) {
  const auto start = Clock::now();
  EnvRank env;
  std::vector<ConfigViolation> violations = read_env_rank(config, &env, options.getenv);
  if (!violations.empty()) throw ConfigError(std::move(violations));
  single_intra_op_thread();
  auto run = std::make_shared<ThreadRun>(config, 1);
  run->faults = FaultPlan::from_specs(config.inject, env.world_size);
  run->program = program;
  run->transport = options.transport;
  run->own_process = true;
  run->gather = true;
  const std::string where = "TCPStore " + env.master_addr + ":" + std::to_string(env.master_port) +
                            (env.rank == 0 ? " (master)" : "");
  run->rendezvous = [env, &config] {
    return Rendezvous::tcp(env.master_addr, env.master_port, env.world_size, env.rank == 0,
                           timeout_ms(config));
  };
  run->start = start;
  std::vector<Slot> slots = run_threads(run, {env.rank});
  LaunchResult result = finish(slots, config, run->topology, start);
  result.rendezvous = where;
  if (result.ok()) {
    // The gathered array: every rank's result.
    const nlohmann::json all = result.results[env.rank];
    for (int r = 0; r < result.world_size && r < static_cast<int>(all.size()); ++r)
      result.results[r] = all[r];
  }
  return result;
}

// ---------------------------------------------------------------- processes

std::string result_path(const std::string& dir, int rank) {
  return dir + "/result." + std::to_string(rank) + ".json";
}

// The shared status file: one RankStatusRecord per rank, MAP_SHARED.
class StatusMapping {
 public:
  StatusMapping(const std::string& path, int world, bool create) : size_(sizeof(RankStatusRecord) * world) {
    const int fd = ::open(path.c_str(), create ? (O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC) : (O_RDWR | O_CLOEXEC), 0600);
    if (fd < 0) throw std::runtime_error("cannot open status file " + path + ": " + std::strerror(errno));
    if (create && ::ftruncate(fd, static_cast<off_t>(size_)) != 0) {
      ::close(fd);
      throw std::runtime_error("cannot size status file " + path + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < size_) {
      ::close(fd);
      throw std::runtime_error("status file " + path + " is too small for the world");
    }
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("cannot map status file " + path + ": " + std::strerror(errno));
    records_ = static_cast<RankStatusRecord*>(p);
  }
  ~StatusMapping() { ::munmap(records_, size_); }
  StatusMapping(const StatusMapping&) = delete;
  StatusMapping& operator=(const StatusMapping&) = delete;
  RankStatusRecord* record(int rank) { return records_ + rank; }

 private:
  std::size_t size_;
  RankStatusRecord* records_ = nullptr;
};

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = '\0';
  return buf;
}

void apply_worker_file(Slot& slot, const std::string& dir) {
  const std::optional<std::string> text = files::read(result_path(dir, slot.rank));
  if (!text) return;
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    if (j.value("ok", false)) {
      slot.end.outcome = Outcome::ok;
      slot.end.result = j.value("result", nlohmann::json());
    } else {
      const std::string outcome = j.value("outcome", "threw");
      slot.end.outcome = outcome == "cancelled" ? Outcome::cancelled : Outcome::threw;
      slot.end.error = j.value("error", "");
      slot.end.in_collective = j.value("in_collective", false);
      slot.end.mismatch = j.value("mismatch", false);
    }
  } catch (const std::exception& e) {
    slot.end.outcome = Outcome::exited;
    slot.end.error = "unreadable result file: " + one_line(e.what(), 200);
  }
}

LaunchResult launch_processes(const RunConfig& config, const std::string& program_name,
                              const LaunchOptions& options) {
  const auto start = Clock::now();
  const int world = config.world_size();
  const ParallelTopology topology(config.tp, config.cp, config.dp);
  const FaultPlan faults = FaultPlan::from_specs(config.inject, world);
  bool expect_crash = false;
  for (int r = 0; r < world; ++r) expect_crash = expect_crash || faults.rank_fault(r) == RankFaultKind::crash;

  files::TempDir dir("parity-run");
  if (!files::try_write_atomically(dir.path() + "/config.json", to_json(config).dump()))
    throw std::runtime_error("cannot write " + dir.path() + "/config.json");
  StatusMapping status(dir.path() + "/status", world, /*create=*/true);
  for (int r = 0; r < world; ++r) RankStatus::reset(status.record(r), r);

  const std::string exe = options.worker_executable.empty() ? self_executable() : options.worker_executable;
  if (::access(exe.c_str(), X_OK) != 0)
    throw std::runtime_error("worker executable " + exe + " is not executable: " + std::strerror(errno));

  std::vector<Slot> slots(world);
  std::vector<pid_t> pids(world, -1);
  const pid_t parent = ::getpid();
  auto kill_all = [&](int sig) {
    for (int r = 0; r < world; ++r)
      if (pids[r] > 0 && !slots[r].done) ::kill(pids[r], sig);
  };
  // Everything a child needs is prepared before fork: between fork and exec it
  // only makes async-signal-safe calls.
  for (int r = 0; r < world; ++r) {
    slots[r].rank = r;
    slots[r].record = status.record(r);
    std::vector<std::string> args = {exe, "__rank-worker", "--rank", std::to_string(r), "--dir", dir.path(),
                                     "--program", program_name};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      kill_all(SIGKILL);
      for (int q = 0; q < r; ++q) ::waitpid(pids[q], nullptr, 0);
      throw std::runtime_error(std::string("fork failed: ") + std::strerror(err));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      if (expect_crash) {
        struct rlimit no_core {0, 0};
        ::setrlimit(RLIMIT_CORE, &no_core);
      }
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    pids[r] = pid;
  }

  const double timeout = config.timeout;
  std::optional<Clock::time_point> stopped_at;
  bool killed_hard = false;
  while (true) {
    bool all_done = true, any_failed = false;
    for (int r = 0; r < world; ++r) {
      Slot& s = slots[r];
      if (!s.done) {
        int wstatus = 0;
        const pid_t got = ::waitpid(pids[r], &wstatus, WNOHANG);
        if (got == pids[r]) {
          s.done = true;
          s.end_seconds = seconds_since(start);
          if (WIFEXITED(wstatus)) {
            const int code = WEXITSTATUS(wstatus);
            apply_worker_file(s, dir.path());
            if (s.end.outcome == Outcome::running || (code != 0 && s.end.outcome == Outcome::ok)) {
              s.end.outcome = Outcome::exited;
              s.end.exit_code = code;
              s.end.error = RankStatus(s.record).error();
              if (code == 127) s.end.error = "could not start the worker " + exe;
            }
          } else if (WIFSIGNALED(wstatus)) {
            s.end.signal = WTERMSIG(wstatus);
            s.end.outcome = stopped_at && (s.end.signal == SIGTERM || s.end.signal == SIGKILL)
                                ? Outcome::killed
                                : Outcome::crashed;
            s.end.in_collective = RankStatus(s.record).state() == RankState::in_collective;
          }
        }
      }
      all_done = all_done && s.done;
      any_failed = any_failed || (s.done && s.end.outcome != Outcome::ok);
    }
    if (all_done) break;
    if (!stopped_at) {
      bool hang = false;
      for (const Slot& s : slots) hang = hang || (!s.done && is_stale(s, timeout));
      if (any_failed || hang) {
        take_snapshots(slots);
        // A worker that already finished or failed its program is only writing
        // its result (a failed one: its error, which names the culprit): it
        // gets the grace period before SIGKILL instead of SIGTERM.
        for (int r = 0; r < world; ++r) {
          const RankState state = RankStatus(slots[r].record).state();
          if (!slots[r].done && state != RankState::finished && state != RankState::failed)
            ::kill(pids[r], SIGTERM);
        }
        stopped_at = Clock::now();
      }
    } else if (!killed_hard && Clock::now() - *stopped_at > kKillGrace) {
      kill_all(SIGKILL);
      killed_hard = true;
    }
    std::this_thread::sleep_for(kPoll);
  }

  LaunchResult result = finish(slots, config, topology, start);
  result.rendezvous = "FileStore " + dir.path() + "/store";
  return result;
}

}  // namespace

// ---------------------------------------------------------------- public

void RankContext::fault_point(std::string_view point) {
  status.mark_progress();
  fire_rank_fault(faults, rank, own_process, cancel);
}

void RankContext::check_cancelled() const {
  if (cancel.cancelled()) throw RankCancelled();
}

void register_rank_program(const std::string& name, RankProgram program) {
  ProgramRegistry& r = programs();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.programs[name] = std::move(program);
}

std::vector<std::string> rank_program_names() {
  ProgramRegistry& r = programs();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [n, p] : r.programs) names.push_back(n);
  return names;
}

nlohmann::json LaunchResult::to_json() const {
  nlohmann::json j;
  j["ok"] = ok();
  j["world_size"] = world_size;
  j["local_ranks"] = local_ranks;
  j["results"] = results;
  j["wall_seconds"] = wall_seconds;
  j["rendezvous"] = rendezvous;
  j["failure"] = failure ? failure->to_json() : nlohmann::json();
  return j;
}

LaunchResult launch(const RunConfig& config, const std::string& program,
                    const LaunchOptions& options) {
  const RankProgram p = find_program(program);
  ignore_sigpipe();
  switch (config.launch) {
    case LaunchMode::threads: return launch_threads(config, p, options);
    case LaunchMode::processes: return launch_processes(config, program, options);
    case LaunchMode::env: return launch_env(config, p, options);
  }
  throw std::logic_error("unknown launch mode");
}

std::vector<ConfigViolation> read_env_rank(
    const RunConfig& config, EnvRank* out,
    const std::function<std::optional<std::string>(const std::string&)>& getenv) {
  using K = ConfigViolation::Kind;
  auto get = [&](const std::string& name) -> std::optional<std::string> {
    if (getenv) return getenv(name);
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
  std::vector<ConfigViolation> v;
  auto integer = [&](const std::string& name, const std::string& text, int* value) {
    try {
      std::size_t used = 0;
      const long long x = std::stoll(text, &used);
      if (used != text.size() || x < 0 || x > 1000000) throw std::invalid_argument("");
      *value = static_cast<int>(x);
      return true;
    } catch (const std::exception&) {
      v.push_back({name, text, "must be a non-negative integer", K::env});
      return false;
    }
  };
  // torchrun first, Slurm when RANK is unset.
  EnvRank e;
  std::string rank_var = "RANK", world_var = "WORLD_SIZE", local_var = "LOCAL_RANK";
  e.source = "torchrun";
  if (!get("RANK") && get("SLURM_PROCID")) {
    rank_var = "SLURM_PROCID";
    world_var = "SLURM_NTASKS";
    local_var = "SLURM_LOCALID";
    e.source = "slurm";
  }
  const std::optional<std::string> rank = get(rank_var), world = get(world_var),
                                   local = get(local_var), addr = get("MASTER_ADDR"),
                                   port = get("MASTER_PORT");
  bool rank_ok = false, world_ok = false;
  if (!rank) v.push_back({"RANK", "", "not set (--launch env needs RANK, or SLURM_PROCID)", K::env});
  else rank_ok = integer(rank_var, *rank, &e.rank);
  if (!world) v.push_back({world_var, "", "not set (--launch env needs it)", K::env});
  else world_ok = integer(world_var, *world, &e.world_size);
  if (local) integer(local_var, *local, &e.local_rank);
  if (!addr || addr->empty()) v.push_back({"MASTER_ADDR", "", "not set (--launch env needs it)", K::env});
  else e.master_addr = *addr;
  if (!port) {
    v.push_back({"MASTER_PORT", "", "not set (--launch env needs it)", K::env});
  } else if (integer("MASTER_PORT", *port, &e.master_port) && (e.master_port < 1 || e.master_port > 65535)) {
    v.push_back({"MASTER_PORT", *port, "must be a port in 1-65535", K::env});
  }
  if (world_ok && config.tp >= 1 && config.cp >= 1 && config.dp >= 1 &&
      e.world_size != config.world_size())
    v.push_back({world_var, *world,
                 "must equal tp*cp*dp = " + std::to_string(config.tp) + "*" + std::to_string(config.cp) +
                     "*" + std::to_string(config.dp) + " = " + std::to_string(config.world_size()),
                 K::env});
  if (rank_ok && world_ok && e.rank >= e.world_size)
    v.push_back({rank_var, *rank, "must be < " + world_var + " = " + *world, K::env});
  if (out) *out = e;
  return v;
}

int run_rank_worker(int argc, char** argv) {
  int rank = -1;
  std::string dir, program;
  for (int i = 0; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--rank") rank = std::atoi(argv[i + 1]);
    else if (key == "--dir") dir = argv[i + 1];
    else if (key == "--program") program = argv[i + 1];
  }
  if (rank < 0 || dir.empty() || program.empty()) {
    std::fprintf(stderr,
                 "parity __rank-worker: internal subcommand of --launch processes "
                 "(needs --rank R --dir DIR --program NAME)\n");
    return 2;
  }
  RunConfig config;
  try {
    const std::optional<std::string> text = files::read(dir + "/config.json");
    if (!text) throw std::runtime_error("cannot read " + dir + "/config.json");
    config = run_config_from_json(nlohmann::json::parse(*text));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity __rank-worker: rank %d: %s\n", rank, e.what());
    return 2;
  }
  const int world = config.world_size();
  if (rank >= world) {
    std::fprintf(stderr, "parity __rank-worker: rank %d outside a world of %d\n", rank, world);
    return 2;
  }
  std::optional<StatusMapping> mapping;
  try {
    mapping.emplace(dir + "/status", world, /*create=*/false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity __rank-worker: rank %d: %s\n", rank, e.what());
    return 2;
  }
  RankStatus status(mapping->record(rank));
  status.mark_progress();
  single_intra_op_thread();
  ignore_sigpipe();

  RankEnd end;
  try {
    const FaultPlan faults = FaultPlan::from_specs(config.inject, world);
    const RankProgram program_fn = find_program(program);
    const ParallelTopology topology(config.tp, config.cp, config.dp);
    CancelToken cancel;  // never cancelled: the parent signals a worker instead
    const std::string store = dir + "/store";
    end = run_rank_body(
        config, topology, rank,
        [&] { return Rendezvous::file(store, world, timeout_ms(config)); }, "gloo", status, faults,
        cancel, /*own_process=*/true, program_fn, /*gather=*/false);
  } catch (const std::exception& e) {
    end.outcome = Outcome::threw;
    end.error = one_line(e.what());
    status.set_error(end.error);
  }
  nlohmann::json j;
  j["rank"] = rank;
  j["ok"] = end.outcome == Outcome::ok;
  if (end.outcome == Outcome::ok) {
    j["result"] = end.result;
  } else {
    j["outcome"] = end.outcome == Outcome::cancelled ? "cancelled" : "threw";
    j["error"] = end.error;
    j["in_collective"] = end.in_collective;
    j["mismatch"] = end.mismatch;
  }
  files::try_write_atomically(result_path(dir, rank), j.dump());
  // Exit without running static destructors of LibTorch/Gloo state.
  std::fflush(nullptr);
  std::_Exit(end.outcome == Outcome::ok ? 0 : 3);
}

int print_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    std::perror("parity __free-port: socket");
    return 3;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("parity __free-port: bind");
    ::close(fd);
    return 3;
  }
  std::printf("%d\n", ntohs(addr.sin_port));
  ::close(fd);
  return 0;
}

}  // namespace parity
