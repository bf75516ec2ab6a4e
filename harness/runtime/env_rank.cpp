#include "harness/runtime/env_rank.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include "harness/base/check.h"
#include "harness/compat/torch_compat.h"

namespace parity {

namespace {

// A run id as part of a file name: torchrun's are uuids or user-chosen text.
std::string file_name_part(const std::string& text) {
  std::string out;
  for (const char c : text.substr(0, 64))
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return out.empty() ? "none" : out;
}

}  // namespace

LibTorchStore this_libtorch_store() {
  return {compat::kTcpStoreValidatesClients, compat::kLibTorchVersion};
}

std::vector<LaunchProblem> read_env_rank(int tp, int cp, int dp, EnvRank* out,
                                         const EnvReader& getenv) {
  return read_env_rank(tp, cp, dp, out, getenv, this_libtorch_store());
}

std::vector<LaunchProblem> read_env_rank(int tp, int cp, int dp, EnvRank* out,
                                         const EnvReader& getenv, const LibTorchStore& libtorch) {
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
      if (used != text.size() || x < 0 || x > 1000000) PARITY_FAIL("");
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
  // torch/distributed/rendezvous.py reads the same variable ("True"), with
  // init_process_group's keys under /worker/attempt_<TORCHELASTIC_RESTART_COUNT>.
  const std::string attempt = get("TORCHELASTIC_RESTART_COUNT").value_or("0");
  if (const std::optional<std::string> agent = get("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*agent == "True" || *agent == "true" || *agent == "1") {
      e.agent_store = true;
    } else if (!(*agent == "False" || *agent == "false" || *agent == "0" || agent->empty())) {
      problem("TORCHELASTIC_USE_AGENT_STORE", *agent, "must be True or False");
    }
  }
  const std::optional<std::string> local_world = get("LOCAL_WORLD_SIZE");
  if (local_world) integer("LOCAL_WORLD_SIZE", *local_world, &e.local_world_size);
  if (e.agent_store && libtorch.validates_clients) {
    e.store = EnvStore::agent_client;
    e.store_prefix = "/parity/attempt_" + attempt + "/";
  } else if (e.agent_store && world_ok && e.local_world_size == e.world_size) {
    // One node: a FileStore in a directory every local rank names alike and
    // no other live run can (the agent's port is bound while the run lives).
    e.store = EnvStore::node_file;
    const std::string tmp = get("TMPDIR").value_or("");
    e.node_dir = (tmp.empty() ? std::string("/tmp") : tmp) + "/parity-torchrun-u" +
                 std::to_string(::getuid()) + "-" +
                 file_name_part(get("TORCHELASTIC_RUN_ID").value_or("")) + "-p" +
                 (port ? file_name_part(*port) : std::string("0")) + "-a" + file_name_part(attempt);
  } else if (e.agent_store && world_ok) {
    const std::string where = local_world
                                  ? "across nodes (LOCAL_WORLD_SIZE=" + *local_world + " of " +
                                        world_var + "=" + *world + ")"
                                  : "with LOCAL_WORLD_SIZE unset (one node cannot be assumed)";
    problem("TORCHELASTIC_USE_AGENT_STORE", *get("TORCHELASTIC_USE_AGENT_STORE"),
            where + " parity built against LibTorch " + libtorch.version +
                " cannot use torchrun's store (torch >= 2.1 speaks another TCPStore protocol); "
                "run torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (rank 0 then binds "
                "MASTER_PORT) or build parity against torch >= 2.1 (the torch2 preset)");
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
