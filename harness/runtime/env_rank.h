#pragma once
// Env mode: this process is one rank of a job started by torchrun or srun.
//  torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. torchrun
//    from torch 2.x serves the store on MASTER_PORT itself and sets
//    TORCHELASTIC_USE_AGENT_STORE=True: then every rank (rank 0 included)
//    connects to the agent's store as a client, under a key prefix of its own
//    (as init_process_group does), instead of rank 0 binding the port.
//  Slurm (when RANK is unset): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;
//    MASTER_ADDR defaults to SLURM_LAUNCH_NODE_IPADDR (the node srun ran on,
//    the batch host under sbatch); MASTER_PORT must be exported.
#include <string>
#include <vector>

#include "harness/runtime/launch_spec.h"

namespace parity {

struct EnvRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string source;  // "torchrun" or "slurm"
  // torchrun's agent serves the store: connect as a client, keys under store_prefix.
  bool agent_store = false;
  std::string store_prefix;  // "" unless agent_store
};

// Reads the variables through `getenv` (empty = the process environment).
// Problems name the variable (LaunchProblem::environment), e.g.
// `WORLD_SIZE=3: must equal tp*cp*dp = 2*1*1 = 2`.
std::vector<LaunchProblem> read_env_rank(int tp, int cp, int dp, EnvRank* out,
                                         const EnvReader& getenv = {});

}  // namespace parity
