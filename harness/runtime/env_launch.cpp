// Env mode: this process is one rank of a torchrun or srun job (env_rank.h).
#include "harness/runtime/launch_modes.h"

namespace parity {

LaunchResult launch_env(const LaunchSpec& spec, const RankProgram& program,
                        const nlohmann::json& arguments) {
  const auto start = SupervisorClock::now();
  EnvRank env;
  std::vector<LaunchProblem> problems = read_env_rank(spec.tp, spec.cp, spec.dp, &env, spec.getenv);
  if (!problems.empty()) throw LaunchSpecError(std::move(problems));
  single_intra_op_thread();
  auto run = std::make_shared<RankRun>(spec, arguments, program);
  run->own_process = true;
  run->gather = true;
  // Under torchrun 2.x the agent already serves MASTER_PORT: every rank is a client.
  const bool master = env.rank == 0 && !env.agent_store;
  const std::string where =
      "TCPStore " + env.master_addr + ":" + std::to_string(env.master_port) +
      (env.agent_store ? " (torchrun agent's, keys under " + env.store_prefix + ")"
                       : (master ? " (master)" : ""));
  run->rendezvous = [env, master, timeout = timeout_ms(spec)] {
    return Rendezvous::tcp(env.master_addr, env.master_port, env.world_size, master, timeout,
                           env.store_prefix);
  };
  const std::vector<Slot> slots = run_rank_threads(run, {env.rank}, start);
  LaunchResult result = finish(slots, spec, run->topology, start);
  result.rendezvous = where;
  if (result.ok()) {
    // The gathered array: every rank's result.
    const nlohmann::json all = result.results[env.rank];
    for (int r = 0; r < result.world_size && r < static_cast<int>(all.size()); ++r)
      result.results[r] = all[r];
  }
  return result;
}

}  // namespace parity
