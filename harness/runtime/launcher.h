#pragma once
// Runs a named rank program on every rank of a TP x CP x DP world, in one of
// three launch modes, and supervises it:
//  threads   one process, one thread per rank, an in-process store;
//  processes the parent fork+execs one worker per rank (`parity __rank-worker`),
//            a FileStore in a private temp dir, a shared status file;
//  env       torchrun/Slurm: this process is one rank (RANK, WORLD_SIZE, ...),
//            a TCPStore at MASTER_ADDR:MASTER_PORT.
// A rank that throws, crashes or makes no progress for `timeout` seconds ends
// the run with a FailureReport; nothing is left running when launch() returns
// (see FailureReport::abandoned_threads for the one exception).
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/run_config.h"
#include "harness/runtime/failure_report.h"
#include "harness/parallel/process_groups.h"
#include "harness/parallel/rank_status.h"
#include "harness/runtime/runtime_faults.h"
#include "harness/parallel/topology.h"

namespace parity {

// What a rank program gets.
struct RankContext {
  const RunConfig& config;
  const ParallelTopology& topology;
  int rank;
  RankCoordinates coordinates;
  RankGroups& groups;
  RankStatus& status;
  const FaultPlan& faults;
  const CancelToken& cancel;
  bool own_process;  // processes/env: the rank is the whole process

  Communicator& group(Axis axis) { return groups.get(axis); }
  // The rank program's fault point: fires this rank's injected runtime fault
  // (crash-rank / hang-rank / throw-rank), if any; marks progress otherwise.
  // Programs call it after their first collectives, so a report's "last
  // collective" is meaningful. `point` names the place (for docs and traces).
  void fault_point(std::string_view point);
  // Throws RankCancelled when the supervisor has stopped the run.
  void check_cancelled() const;
};

// A rank program returns a small JSON result. It is looked up by name because
// process ranks are the same binary re-executed.
using RankProgram = std::function<nlohmann::json(RankContext&)>;
void register_rank_program(const std::string& name, RankProgram program);
std::vector<std::string> rank_program_names();  // "self-check" is built in

struct LaunchOptions {
  // processes: the worker executable, run as `EXE __rank-worker ...`; "" means
  // this executable (/proc/self/exe). Tests point it at the parity binary.
  std::string worker_executable;
  std::string transport = "gloo";
  // env: how environment variables are read (tests substitute a map).
  std::function<std::optional<std::string>(const std::string&)> getenv;
};

struct LaunchResult {
  int world_size = 1;
  std::vector<int> local_ranks;          // the ranks this process ran or supervised
  // By global rank; null where none came back. Env mode: rank 0 holds every
  // rank's result (gathered over the world group); other ranks hold their own.
  std::vector<nlohmann::json> results;
  std::optional<FailureReport> failure;  // set iff the run failed
  double wall_seconds = 0;
  // The rendezvous used ("in-process HashStore", "FileStore ...", "TCPStore ...").
  std::string rendezvous;

  bool ok() const { return !failure.has_value(); }
  nlohmann::json to_json() const;
};

// Validates nothing but the launch itself (validate_run_config first). Throws
// ConfigError for env-mode environment problems, std::invalid_argument for an
// unknown program. Every rank failure is in the result, not thrown.
LaunchResult launch(const RunConfig& config, const std::string& program,
                    const LaunchOptions& options = {});

// Env mode: this process's rank, read from RANK/WORLD_SIZE/LOCAL_RANK (or
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID when RANK is unset) and
// MASTER_ADDR/MASTER_PORT.
struct EnvRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string source;  // "torchrun" or "slurm"
};
// Violations name the variable (ConfigViolation::Kind::env), e.g.
// `WORLD_SIZE=3: must equal tp*cp*dp = 4`.
std::vector<ConfigViolation> read_env_rank(
    const RunConfig& config, EnvRank* out,
    const std::function<std::optional<std::string>(const std::string&)>& getenv = {});

// The hidden `parity __rank-worker` subcommand (processes-mode children):
// argv after the subcommand name. Returns the process exit code.
int run_rank_worker(int argc, char** argv);
// The hidden `parity __free-port` helper: binds 127.0.0.1:0, prints the port.
int print_free_port();

}  // namespace parity
