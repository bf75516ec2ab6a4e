#include "harness/runtime/env_rank.h"

#include <cstdlib>

namespace parity {

std::vector<LaunchProblem> read_env_rank(int tp, int cp, int dp, EnvRank* out,
                                         const EnvReader& getenv) {
  auto get = [&](const std::string& name) -> std::optional<std::string> {
    if (getenv) return getenv(name);
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
  std::vector<LaunchProblem> v;
  auto problem = [&](const std::string& name, const std::string& value, const std::string& rule) {
    v.push_back({name, value, rule, /*environment=*/true});
  };
  auto integer = [&](const std::string& name, const std::string& text, int* value) {
    try {
      std::size_t used = 0;
      const long long x = std::stoll(text, &used);
      if (used != text.size() || x < 0 || x > 1000000) throw std::invalid_argument("");
      *value = static_cast<int>(x);
      return true;
    } catch (const std::exception&) {
      problem(name, text, "must be a non-negative integer");
      return false;
    }
  };
  // torchrun first, Slurm when RANK is unset.
  EnvRank e;
  std::string rank_var = "RANK", world_var = "WORLD_SIZE", local_var = "LOCAL_RANK";
  std::optional<std::string> addr = get("MASTER_ADDR");
  e.source = "torchrun";
  if (!get("RANK") && get("SLURM_PROCID")) {
    rank_var = "SLURM_PROCID";
    world_var = "SLURM_NTASKS";
    local_var = "SLURM_LOCALID";
    e.source = "slurm";
    if (!addr || addr->empty()) addr = get("SLURM_LAUNCH_NODE_IPADDR");
  }
  const std::optional<std::string> rank = get(rank_var), world = get(world_var),
                                   local = get(local_var), port = get("MASTER_PORT");
  bool rank_ok = false, world_ok = false;
  if (!rank)
    problem("RANK", "", "not set (--launch env needs RANK, or SLURM_PROCID)");
  else
    rank_ok = integer(rank_var, *rank, &e.rank);
  if (!world)
    problem(world_var, "", "not set (--launch env needs it)");
  else
    world_ok = integer(world_var, *world, &e.world_size);
  if (local) integer(local_var, *local, &e.local_rank);
  if (!addr || addr->empty())
    problem("MASTER_ADDR", "",
            e.source == "slurm" ? "not set, nor SLURM_LAUNCH_NODE_IPADDR (--launch env needs it)"
                                : "not set (--launch env needs it)");
  else
    e.master_addr = *addr;
  if (!port) {
    problem("MASTER_PORT", "",
            e.source == "slurm" ? "not set (--launch env needs it; export it in the batch script)"
                                : "not set (--launch env needs it)");
  } else if (integer("MASTER_PORT", *port, &e.master_port) &&
             (e.master_port < 1 || e.master_port > 65535)) {
    problem("MASTER_PORT", *port, "must be a port in 1-65535");
  }
  // torch/distributed/rendezvous.py reads the same variable ("True"/"true"/"1"),
  // with the key prefix under TORCHELASTIC_RESTART_COUNT.
  if (const std::optional<std::string> agent = get("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*agent == "True" || *agent == "true" || *agent == "1") {
      e.agent_store = true;
      const std::string attempt = get("TORCHELASTIC_RESTART_COUNT").value_or("0");
      e.store_prefix = "/parity/attempt_" + attempt + "/";
    } else if (!(*agent == "False" || *agent == "false" || *agent == "0" || agent->empty())) {
      problem("TORCHELASTIC_USE_AGENT_STORE", *agent, "must be True or False");
    }
  }
  const int expected = tp * cp * dp;
  if (world_ok && tp >= 1 && cp >= 1 && dp >= 1 && e.world_size != expected)
    problem(world_var, *world,
            "must equal tp*cp*dp = " + std::to_string(tp) + "*" + std::to_string(cp) + "*" +
                std::to_string(dp) + " = " + std::to_string(expected));
  if (rank_ok && world_ok && e.rank >= e.world_size)
    problem(rank_var, *rank, "must be < " + world_var + " = " + *world);
  if (out) *out = e;
  return v;
}

}  // namespace parity
