#pragma once
// Runs a named rank program on every rank of a TP x CP x DP world, in one of
// three launch modes, and supervises it (harness/runtime/supervisor.h):
//  threads   one process, one thread per rank, an in-process store
//            (thread_ranks.cpp);
//  processes the parent fork+execs one worker per rank (`parity __rank-worker`),
//            a FileStore in a private temp dir, a shared status file
//            (process_ranks.cpp, rank_worker.cpp);
//  env       torchrun/Slurm: this process is one rank (env_rank.h), a TCPStore
//            at MASTER_ADDR:MASTER_PORT, or a FileStore of one node's ranks
//            where torchrun's store speaks a newer protocol (env_launch.cpp).
// A rank that throws, crashes or makes no progress for the timeout ends the
// run with a FailureReport; nothing is left running when launch() returns
// (see FailureReport::abandoned_threads for the one exception).
// The launcher knows a LaunchSpec and the program's arguments as opaque JSON;
// harness/config/launch_mapping.h maps a RunConfig onto both.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/parallel/process_groups.h"
#include "harness/parallel/rank_status.h"
#include "harness/parallel/topology.h"
#include "harness/runtime/env_rank.h"
#include "harness/runtime/failure_report.h"
#include "harness/runtime/launch_spec.h"
#include "harness/runtime/runtime_faults.h"

namespace parity {

// What a rank program gets.
struct RankContext {
  const LaunchSpec& spec;
  const nlohmann::json& arguments;  // the program's own, as given to launch()
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
// Throws std::invalid_argument listing the known names.
RankProgram find_rank_program(const std::string& name);

struct LaunchResult {
  int world_size = 1;
  std::vector<int> local_ranks;  // the ranks this process ran or supervised
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

// Throws LaunchSpecError for a bad spec (faults) or env-mode environment
// problems, std::invalid_argument for an unknown program. Every rank failure is
// in the result, not thrown.
LaunchResult launch(const LaunchSpec& spec, const std::string& program,
                    const nlohmann::json& arguments);

// The hidden `parity __rank-worker` subcommand (processes-mode children):
// argv after the subcommand name. Returns the process exit code.
int run_rank_worker(int argc, char** argv);
// The hidden `parity __agent-store` helper: serves a TCPStore on 127.0.0.1,
// port 0 (the kernel picks a free one, so no race), prints the port, and
// serves until its standard input closes: torchrun's agent, for tests.
int serve_agent_store();

}  // namespace parity
