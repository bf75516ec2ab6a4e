#include "harness/runtime/launcher.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "harness/base/check.h"
#include "harness/runtime/launch_modes.h"
#include "harness/runtime/self_check.h"

namespace parity {
namespace {

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

}  // namespace

RankProgram find_rank_program(const std::string& name) {
  ProgramRegistry& r = programs();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.programs.find(name);
  if (it != r.programs.end()) return it->second;
  std::string known;
  for (const auto& [n, p] : r.programs) known += (known.empty() ? "" : ", ") + n;
  PARITY_FAIL("unknown rank program \"" + name + "\" (known: " + known + ")");
}

void RankContext::fault_point(std::string_view) {
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

LaunchResult launch(const LaunchSpec& spec, const std::string& program,
                    const nlohmann::json& arguments) {
  const RankProgram p = find_rank_program(program);
  // Spec problems before anything starts (the RankRun would throw them later).
  std::vector<LaunchProblem> problems = fault_spec_problems(spec.faults, spec.world_size());
  if (spec.transport.empty())
    problems.push_back({"transport", "", "not set (the backend's transport_name())"});
  const int etp = spec.etp > 0 ? spec.etp : spec.tp;
  if (spec.ep < 1 ||
      (etp == spec.tp && spec.cp >= 1 && spec.dp >= 1 && (spec.cp * spec.dp) % spec.ep != 0))
    problems.push_back({"ep", std::to_string(spec.ep),
                        "must divide cp*dp = " + std::to_string(spec.cp * spec.dp)});
  else if (spec.etp < 0 || (spec.tp >= 1 && spec.cp >= 1 && spec.dp >= 1 &&
                            (spec.tp * spec.cp * spec.dp) % (etp * spec.ep) != 0))
    problems.push_back(
        {"etp", std::to_string(spec.etp),
         "etp*ep must divide tp*cp*dp = " + std::to_string(spec.tp * spec.cp * spec.dp)});
  if (!problems.empty()) throw LaunchSpecError(std::move(problems));
  ignore_sigpipe();
  switch (spec.mode) {
    case LaunchMode::threads:
      return launch_threads(spec, p, arguments);
    case LaunchMode::processes:
      return launch_processes(spec, program, arguments);
    case LaunchMode::env:
      return launch_env(spec, p, arguments);
  }
  PARITY_FAIL_INTERNAL("unknown launch mode");
}

int serve_agent_store() {
  try {
    // world size 1, not waiting: clients only connect; nobody else binds.
    const std::shared_ptr<Rendezvous> store =
        Rendezvous::tcp("127.0.0.1", 0, 1, /*is_master=*/true, std::chrono::milliseconds(600000));
    std::printf("%d\n", store->port());
    std::fflush(stdout);
    char buf[256];
    while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity __agent-store: %s\n", e.what());
    return 3;
  }
  std::fflush(nullptr);
  std::_Exit(0);  // as the worker: skip LibTorch's static destructors
}

}  // namespace parity
