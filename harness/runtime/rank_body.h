#pragma once
// One rank's life, the same in every launch mode: connect (rendezvous, groups),
// run the program, optionally gather every rank's result, pass the exit
// barrier, and say how it ended. Internal to harness/runtime.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/parallel/rank_status.h"
#include "harness/parallel/rendezvous.h"
#include "harness/parallel/topology.h"
#include "harness/runtime/launcher.h"
#include "harness/runtime/runtime_faults.h"

namespace parity {

class Communicator;

enum class Outcome { running, ok, threw, crashed, cancelled, exited, killed };

struct RankEnd {
  Outcome outcome = Outcome::running;
  std::string error;
  bool in_collective = false;
  ThrownError thrown = ThrownError::other;  // Outcome::threw: by the exception's type
  std::string error_kind;                   // a KindedError's kind
  nlohmann::json result;
  int signal = 0;     // processes: the signal that ended the worker
  int exit_code = 0;  // processes: an unexpected exit code
};

using RendezvousMaker = std::function<std::shared_ptr<Rendezvous>()>;

// What every rank of one run shares (the spec, the program and its arguments).
struct RankRun {
  LaunchSpec spec;
  nlohmann::json arguments;
  ParallelTopology topology;
  FaultPlan faults;
  RankProgram program;
  RendezvousMaker rendezvous;
  bool own_process = false;  // processes/env: the rank is the whole process
  bool gather = false;       // env: every rank's result to every rank

  RankRun(LaunchSpec s, nlohmann::json args, RankProgram p)
      : spec(std::move(s)),
        arguments(std::move(args)),
        topology(spec.tp, spec.cp, spec.dp, spec.ep, spec.pp, spec.etp),
        faults(FaultPlan::from_specs(spec.faults, spec.world_size())),
        program(std::move(p)) {}
};

std::chrono::milliseconds timeout_ms(const LaunchSpec& spec);

// Start-up (process start: exec and loading LibTorch took over 15 s on the
// loaded 2-core machine; then the rendezvous) gets this much longer than the
// timeout before the supervisor calls a rank that has not begun hung. Ranks
// that started wait for the others at a start-up barrier, beating, for twice
// as long: in threads and processes mode the supervisor names a rank that never
// arrived first; in env mode, where each process sees only itself, the
// barrier's own limit names it.
inline constexpr double kStartupGraceSeconds = 60.0;

RankEnd run_rank_body(const RankRun& run, int rank, RankStatus& status, const CancelToken& cancel);

// Every rank's result, on every rank, over `world`: the JSON texts as bytes
// (uint8), padded to the longest. Returns a JSON array by rank.
nlohmann::json gather_results(Communicator& world, const nlohmann::json& mine);

// One intra-op thread on the calling thread (OpenMP and MKL count per thread;
// run_rank_body calls it on each rank's thread) and, once per process, one
// OpenBLAS thread.
void single_intra_op_thread();
// Once per process: SIGPIPE ignored.
void ignore_sigpipe();

}  // namespace parity
