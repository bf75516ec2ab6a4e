#pragma once
// Env mode: this process is one rank of a job started by torchrun or srun.
//  torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//    MASTER_PORT. torchrun since mid-2024 (pytorch #128096; any torchrun with the static
//    rendezvous) serves a store on MASTER_PORT itself and sets
//    TORCHELASTIC_USE_AGENT_STORE=True: then no rank may bind that port.
//  Slurm (when RANK is unset): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;
//    MASTER_ADDR defaults to SLURM_LAUNCH_NODE_IPADDR (the node srun ran on,
//    the batch host under sbatch); MASTER_PORT must be exported.
#include <string>
#include <vector>

#include "harness/runtime/launch_spec.h"

namespace parity {

// Where the ranks of an env-mode job find each other.
enum class EnvStore {
  // No agent store: rank 0 binds MASTER_ADDR:MASTER_PORT, the others connect.
  master_binds,
  // The agent's store, which this LibTorch's TCPStore speaks: every rank is a
  // client, keys under EnvRank::store_prefix (as init_process_group does).
  agent_client,
  // This LibTorch predates torch 2.1's TCPStore protocol, which the agent's
  // store may speak (no message tells safely), and every rank is on this node:
  // a FileStore in EnvRank::node_dir, a directory named after the run; the
  // agent's store is never touched.
  node_file,
};

// The TCPStore dialect of the LibTorch parity is built against: whether its
// client can talk to torchrun's agent store (docs/runtime-collectives.md).
struct LibTorchStore {
  bool validates_clients = true;  // torch >= 2.1's protocol
  std::string version;            // "1.13.0"
};
LibTorchStore this_libtorch_store();

struct EnvRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // 0: LOCAL_WORLD_SIZE unset
  std::string master_addr;
  int master_port = 0;
  std::string source;        // "torchrun" or "slurm"
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True
  EnvStore store = EnvStore::master_binds;
  std::string store_prefix;  // agent_client: "/parity/attempt_<n>/"
  std::string node_dir;      // node_file: the run's directory under $TMPDIR
};

// Reads the variables through `getenv` (empty = the process environment).
// Problems name the variable (LaunchProblem::environment), e.g.
// `WORLD_SIZE=3: must equal tp*cp*dp = 2*1*1 = 2`. `libtorch` decides between
// agent_client and node_file (tests pass either; launches pass this build's).
std::vector<LaunchProblem> read_env_rank(int tp, int cp, int dp, EnvRank* out,
                                         const EnvReader& getenv = {});
std::vector<LaunchProblem> read_env_rank(int tp, int cp, int dp, EnvRank* out,
                                         const EnvReader& getenv, const LibTorchStore& libtorch);

}  // namespace parity
