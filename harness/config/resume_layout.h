#pragma once
// Resuming at another layout (docs/weights.md "Saving and resuming"): parity
// check's --resume-at K --resume-layout "tp=1,dp=2" (resume_invariance), and
// what --resume needs of the run it starts.
#include <optional>
#include <string>
#include <vector>

#include "harness/config/run_config.h"

namespace parity {

// The keys a resume layout may set: tp, cp, dp, ep, pp, vpp, sp,
// distributed-optimizer, pp-first-layers, pp-last-layers.
const std::vector<std::string>& resume_layout_keys();

// `scenario` at its resume layout: the layout's keys over the scenario's, the
// microbatches per DP rank scaled so the global batch stays the same, the
// pipeline's placement options dropped where pp changes and the layout names
// none of them, and no resume of its own (resume-at 0, resume-layout "").
// nullopt (and the reason in `why`) for a malformed layout or a global batch
// the new dp cannot split.
std::optional<RunConfig> resumed_config(const RunConfig& scenario, std::string* why = nullptr);

// Two configs that place every rank's work alike: the same tp, cp, dp, ep,
// pp, vpp, sp, pipeline placement, microbatches, micro-batch and sequence, so
// each rank draws the same random numbers in the same order (its RNG streams
// carry over a resume).
bool same_layout(const RunConfig& a, const RunConfig& b);

// What --resume needs of the run against the checkpoint's saving run
// (`saved`, its manifest's scenario) and its `step`: steps past it, the same
// global batch (the data continues at step `step`), the same optimizer.
// One line each: {"field", "rule"}.
struct ResumeProblem {
  std::string field, rule;
};
std::vector<ResumeProblem> resume_problems(const RunConfig& run, const RunConfig& saved,
                                           long long step);

}  // namespace parity
