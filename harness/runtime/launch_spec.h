#pragma once
// What the launcher needs to start a run, and nothing about the rank program:
// the world layout, the launch mode, the supervision timeout, the injected
// runtime faults, collective fingerprints, the transport and the worker
// executable. The rank program's own arguments travel beside it, opaque (JSON).
// harness/config/launch_mapping.h builds one from a RunConfig.
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "harness/base/option_names.h"

namespace parity {

enum class LaunchMode { threads, processes, env };
inline constexpr OptionNames<LaunchMode, 3> kLaunchModeNames{{{LaunchMode::threads, "threads"},
                                                              {LaunchMode::processes, "processes"},
                                                              {LaunchMode::env, "env"}}};
static_assert(kLaunchModeNames.complete());
constexpr const auto& option_names(LaunchMode) { return kLaunchModeNames; }
inline std::string_view launch_mode_name(LaunchMode mode) { return option_name(mode); }

// How environment variables are read; tests substitute a map.
using EnvReader = std::function<std::optional<std::string>(const std::string&)>;

class RankStatus;
// Watches a run while its ranks run: called on the launching thread at every
// supervisor poll (about every 20 ms) with every rank's status, by rank
// (step_rows.h reads the completed steps from them). Threads and processes
// mode only: in env mode this process sees its own rank alone. It must be
// quick (the hang guard waits for it) and must not throw (an exception stops
// the calls, never the run).
using RunWatcher = std::function<void(const std::vector<RankStatus>& ranks)>;

struct LaunchSpec {
  int tp = 1;
  int cp = 1;
  int dp = 1;
  int ep = 1;   // expert parallel, inside cp x dp (ParallelTopology); must divide cp*dp
  int pp = 1;   // pipeline stages (the slowest rank index)
  int etp = 0;  // expert tensor parallel (ParallelTopology); 0 = tp
  LaunchMode mode = LaunchMode::threads;
  double timeout_seconds = 60.0;    // no-progress limit and collective timeout
  std::vector<std::string> faults;  // `--inject` specs, e.g. "crash-rank=1"
  bool check_collectives = false;   // collective fingerprints
  // A registered transport (make_transport_factory): the backend names it.
  std::string transport;
  // processes: the worker executable, run as `EXE __rank-worker ...`; "" means
  // this executable (/proc/self/exe). Tests point it at the parity binary.
  std::string worker_executable;
  // env: how the rank's variables are read; empty = the process environment.
  EnvReader getenv;
  // Empty: nobody watches.
  RunWatcher watcher;

  int world_size() const { return tp * cp * dp * pp; }
};

// The processes-mode hand-off (every field but getenv and watcher).
nlohmann::json launch_spec_to_json(const LaunchSpec& spec);
// Throws std::invalid_argument naming the key on a missing or mistyped key.
LaunchSpec launch_spec_from_json(const nlohmann::json& j);

// One thing wrong with a spec or the environment it is launched in: `field`
// is a spec field ("inject") or an environment variable ("WORLD_SIZE").
struct LaunchProblem {
  std::string field;
  std::string value;
  std::string rule;
  bool environment = false;
};

// Thrown by launch() before any rank starts; what() is every problem, one a line.
class LaunchSpecError : public std::invalid_argument {
 public:
  explicit LaunchSpecError(std::vector<LaunchProblem> problems);
  const std::vector<LaunchProblem>& problems() const { return problems_; }

 private:
  std::vector<LaunchProblem> problems_;
};

}  // namespace parity
