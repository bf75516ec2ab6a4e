#pragma once
// A lower bound of what a run holds in memory, checked before any rank starts:
// a size that cannot fit is bad input (exit 2) naming the estimate and the
// limit, not an allocator failure deep inside a rank.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/config/run_config.h"

namespace parity {

struct MemoryEstimate {
  double parameters = 0;   // bytes per rank: weights and their gradients
  double activations = 0;  // bytes per rank: one microbatch's forward, logits included
  double per_rank() const { return parameters + activations; }
};

// Per rank of `config`'s layout. A lower bound: every count is one the model
// cannot avoid (no optimizer state, no saved-for-backward copies beyond one
// per layer), so a refusal is never a false alarm.
MemoryEstimate estimate_rank_memory(const RunConfig& config);

// MemAvailable of /proc/meminfo, capped by the cgroup's memory.max; nullopt when
// neither can be read.
std::optional<double> available_memory_bytes();

// "48.0 TB"
std::string memory_text(double bytes);

// Empty when the run fits; else one violation naming the estimate and the limit.
// `ranks_here` ranks share this machine (threads and processes: the world;
// env: the local world). `single_rank_too`: parity check also runs the scenario
// on one rank (the same global batch unsharded).
std::vector<ConfigViolation> check_memory(const RunConfig& config, int ranks_here,
                                          bool single_rank_too, std::optional<double> available);

}  // namespace parity
