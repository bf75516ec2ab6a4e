#pragma once
// `parity run`'s output formatting: the per-step loss table, the cross-rank
// loss agreement line and the trace JSONL, from the launcher's per-rank results
// (the rank program "model", harness/driver/training_step.h).
#include <string>

namespace parity {

struct LaunchResult;

// One row per step (loss, observations, slowest rank's seconds). Empty results
// are skipped.
std::string format_loss_table(const LaunchResult& result);
// "" when every rank reported the same loss for every step, else a one-line
// description of the first disagreement.
std::string loss_disagreement(const LaunchResult& result);
// Every rank's trace records as JSONL (docs/trace-format.md), sorted by (rank, seq).
std::string trace_jsonl(const LaunchResult& result);

}  // namespace parity
