// Processes mode: the parent fork+execs one worker per rank and supervises the
// children through the shared status file and waitpid.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "harness/base/files.h"
#include "harness/runtime/launch_modes.h"
#include "harness/runtime/worker_files.h"

namespace parity {

StatusMapping::StatusMapping(const std::string& path, int world, bool create)
    : size_(sizeof(RankStatusRecord) * world) {
  const int fd = ::open(
      path.c_str(), create ? (O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC) : (O_RDWR | O_CLOEXEC), 0600);
  if (fd < 0)
    throw std::runtime_error("cannot open status file " + path + ": " + std::strerror(errno));
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
  if (p == MAP_FAILED)
    throw std::runtime_error("cannot map status file " + path + ": " + std::strerror(errno));
  records_ = static_cast<RankStatusRecord*>(p);
}

StatusMapping::~StatusMapping() { ::munmap(records_, size_); }

namespace {

// After SIGTERM, how long a worker gets before SIGKILL.
constexpr auto kKillGrace = std::chrono::milliseconds(1000);

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = '\0';
  return buf;
}

// The worker's to_string(ThrownError) read back.
ThrownError thrown_error_named(const std::string& name) {
  for (ThrownError t : {ThrownError::collective_mismatch, ThrownError::collective_timeout})
    if (name == to_string(t)) return t;
  return ThrownError::other;
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
      slot.end.thrown = thrown_error_named(j.value("thrown", ""));
      slot.end.error_kind = j.value("error_kind", "");
    }
  } catch (const std::exception& e) {
    slot.end.outcome = Outcome::exited;
    slot.end.error = "unreadable result file: " + one_line(e.what(), 200);
  }
}

class RankProcesses : public RankSet {
 public:
  RankProcesses(std::vector<pid_t> pids, std::string dir, std::string exe,
                SupervisorClock::time_point start)
      : pids_(std::move(pids)), dir_(std::move(dir)), exe_(std::move(exe)), start_(start) {}

  void collect(std::vector<Slot>& slots, std::chrono::milliseconds wait) override {
    for (Slot& s : slots) {
      if (s.done) continue;
      int wstatus = 0;
      if (::waitpid(pids_[s.rank], &wstatus, WNOHANG) != pids_[s.rank]) continue;
      s.done = true;
      s.end_seconds = seconds_since(start_);
      if (WIFEXITED(wstatus)) {
        const int code = WEXITSTATUS(wstatus);
        apply_worker_file(s, dir_);
        if (s.end.outcome == Outcome::running || (code != 0 && s.end.outcome == Outcome::ok)) {
          s.end.outcome = Outcome::exited;
          s.end.exit_code = code;
          s.end.error = RankStatus(s.record).error();
          if (code == 127) s.end.error = "could not start the worker " + exe_;
        }
      } else if (WIFSIGNALED(wstatus)) {
        s.end.signal = WTERMSIG(wstatus);
        s.end.outcome = stopped_ && (s.end.signal == SIGTERM || s.end.signal == SIGKILL)
                            ? Outcome::killed
                            : Outcome::crashed;
        s.end.in_collective = RankStatus(s.record).state() == RankState::in_collective;
      }
    }
    std::this_thread::sleep_for(wait);
  }
  void stop(std::vector<Slot>& slots) override {
    stopped_ = true;
    // A worker that already finished or failed its program is only writing
    // its result (a failed one: its error, which names the culprit): it gets
    // the grace period before SIGKILL instead of SIGTERM.
    for (const Slot& s : slots) {
      const RankState state = RankStatus(s.record).state();
      if (!s.done && state != RankState::finished && state != RankState::failed)
        ::kill(pids_[s.rank], SIGTERM);
    }
  }
  std::chrono::milliseconds stop_grace() const override { return kKillGrace; }
  bool give_up(std::vector<Slot>& slots) override {
    for (const Slot& s : slots)
      if (!s.done) ::kill(pids_[s.rank], SIGKILL);
    return true;  // a SIGKILLed child is reaped next
  }

 private:
  std::vector<pid_t> pids_;
  std::string dir_;
  std::string exe_;
  SupervisorClock::time_point start_;
  bool stopped_ = false;
};

}  // namespace

LaunchResult launch_processes(const LaunchSpec& spec_in, const std::string& program_name,
                              const nlohmann::json& arguments) {
  const auto start = SupervisorClock::now();
  const int world = spec_in.world_size();
  const ParallelTopology topology(spec_in.tp, spec_in.cp, spec_in.dp, spec_in.ep, spec_in.pp,
                                  spec_in.etp);
  const FaultPlan faults = FaultPlan::from_specs(spec_in.faults, world);
  bool expect_crash = false;
  for (int r = 0; r < world; ++r)
    expect_crash = expect_crash || faults.rank_fault(r) == RankFaultKind::crash;

  LaunchSpec spec = spec_in;
  if (spec.worker_executable.empty()) spec.worker_executable = self_executable();
  const std::string exe = spec.worker_executable;
  if (::access(exe.c_str(), X_OK) != 0)
    throw std::runtime_error("worker executable " + exe +
                             " is not executable: " + std::strerror(errno));

  files::TempDir dir("parity-run");
  files::write_atomically(spec_path(dir.path()), launch_spec_to_json(spec).dump());
  files::write_atomically(arguments_path(dir.path()), arguments.dump());
  StatusMapping status(status_path(dir.path()), world, /*create=*/true);
  for (int r = 0; r < world; ++r) RankStatus::reset(status.record(r), r);

  std::vector<Slot> slots(world);
  std::vector<pid_t> pids(world, -1);
  const pid_t parent = ::getpid();
  // Everything a child needs is prepared before fork: between fork and exec it
  // only makes async-signal-safe calls.
  for (int r = 0; r < world; ++r) {
    slots[r].rank = r;
    slots[r].record = status.record(r);
    std::vector<std::string> args = {exe,     "__rank-worker", "--rank",    std::to_string(r),
                                     "--dir", dir.path(),      "--program", program_name};
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      for (int q = 0; q < r; ++q) ::kill(pids[q], SIGKILL);
      for (int q = 0; q < r; ++q) ::waitpid(pids[q], nullptr, 0);
      throw std::runtime_error(std::string("fork failed: ") + std::strerror(err));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      if (expect_crash) {
        struct rlimit no_core {
          0, 0
        };
        ::setrlimit(RLIMIT_CORE, &no_core);
      }
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    pids[r] = pid;
  }

  RankProcesses processes(pids, dir.path(), exe, start);
  supervise(processes, slots, spec.timeout_seconds, spec.watcher);
  LaunchResult result = finish(slots, spec, topology, start);
  result.rendezvous = "FileStore " + store_path(dir.path());
  return result;
}

}  // namespace parity
