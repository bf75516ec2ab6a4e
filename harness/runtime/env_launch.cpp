// Env mode: this process is one rank of a torchrun or srun job (env_rank.h).
#include "harness/runtime/launch_modes.h"

namespace parity {

LaunchResult launch_env(const LaunchSpec& spec_in, const RankProgram& program,
                        const nlohmann::json& arguments) {
  // This process sees its own rank only: nothing for a watcher of the run.
  LaunchSpec spec = spec_in;
  spec.watcher = nullptr;
  const auto start = SupervisorClock::now();
  EnvRank env;
  std::vector<LaunchProblem> problems = read_env_rank(spec.tp, spec.cp, spec.dp, &env, spec.getenv);
  if (!problems.empty()) throw LaunchSpecError(std::move(problems));
  single_intra_op_thread();
  auto run = std::make_shared<RankRun>(spec, arguments, program);
  run->own_process = true;
  run->gather = true;
  const std::string tcp = "TCPStore " + env.master_addr + ":" + std::to_string(env.master_port);
  std::string where;
  switch (env.store) {
    case EnvStore::master_binds: {
      const bool master = env.rank == 0;
      where = tcp + (master ? " (master)" : "");
      run->rendezvous = [env, master, timeout = timeout_ms(spec)] {
        return Rendezvous::tcp(env.master_addr, env.master_port, env.world_size, master, timeout);
      };
      break;
    }
    case EnvStore::agent_client:
      where = tcp + " (torchrun agent's, keys under " + env.store_prefix + ")";
      run->rendezvous = [env, timeout = timeout_ms(spec)] {
        return Rendezvous::tcp(env.master_addr, env.master_port, env.world_size,
                               /*is_master=*/false, timeout, env.store_prefix);
      };
      break;
    case EnvStore::node_file:
      where = "FileStore " + env.node_dir + "/store (one node; torchrun's store at " +
              env.master_addr + ":" + std::to_string(env.master_port) + " unused: LibTorch " +
              this_libtorch_store().version + " predates torch 2.1's TCPStore protocol)";
      run->rendezvous = [env, timeout = timeout_ms(spec)] {
        return Rendezvous::node_file(env.node_dir, env.world_size, timeout);
      };
      break;
  }
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
