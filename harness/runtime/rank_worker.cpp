// `parity __rank-worker --rank R --dir DIR --program NAME`: one rank of a
// processes-mode run (process_ranks.cpp starts it).
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "harness/base/files.h"
#include "harness/runtime/launch_modes.h"
#include "harness/runtime/worker_files.h"

namespace parity {

int run_rank_worker(int argc, char** argv) {
  int rank = -1;
  std::string dir, program;
  for (int i = 0; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--rank")
      rank = std::atoi(argv[i + 1]);
    else if (key == "--dir")
      dir = argv[i + 1];
    else if (key == "--program")
      program = argv[i + 1];
  }
  if (rank < 0 || dir.empty() || program.empty()) {
    std::fprintf(stderr,
                 "parity __rank-worker: internal subcommand of --launch processes "
                 "(needs --rank R --dir DIR --program NAME)\n");
    return 2;
  }
  LaunchSpec spec;
  nlohmann::json arguments;
  try {
    const std::optional<std::string> spec_text = files::read(spec_path(dir));
    if (!spec_text) throw std::runtime_error("cannot read " + spec_path(dir));
    spec = launch_spec_from_json(nlohmann::json::parse(*spec_text));
    const std::optional<std::string> args_text = files::read(arguments_path(dir));
    if (!args_text) throw std::runtime_error("cannot read " + arguments_path(dir));
    arguments = nlohmann::json::parse(*args_text);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity __rank-worker: rank %d: %s\n", rank, e.what());
    return 2;
  }
  const int world = spec.world_size();
  if (rank >= world) {
    std::fprintf(stderr, "parity __rank-worker: rank %d outside a world of %d\n", rank, world);
    return 2;
  }
  std::optional<StatusMapping> mapping;
  try {
    mapping.emplace(status_path(dir), world, /*create=*/false);
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
    RankRun run(spec, arguments, find_rank_program(program));
    run.own_process = true;
    run.rendezvous = [&] { return Rendezvous::file(store_path(dir), world, timeout_ms(spec)); };
    CancelToken cancel;  // never cancelled: the parent signals a worker instead
    end = run_rank_body(run, rank, status, cancel);
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
    j["thrown"] = std::string(to_string(end.thrown));
    j["error_kind"] = end.error_kind;
  }
  int code = end.outcome == Outcome::ok ? 0 : 3;
  try {
    files::write_atomically(result_path(dir, rank), j.dump());
  } catch (const std::exception& e) {
    // Without its file the parent would see a rank that exited 0 without a
    // result: say why, in the status record the parent reads and on stderr.
    const std::string why = "cannot write the result: " + one_line(e.what(), 300);
    status.set_error(why);
    std::fprintf(stderr, "parity __rank-worker: rank %d: %s\n", rank, why.c_str());
    code = kWorkerResultUnwritten;
  }
  // Exit without running static destructors of LibTorch/Gloo state.
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace parity
