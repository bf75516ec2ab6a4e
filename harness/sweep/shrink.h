#pragma once
// `parity sweep --shrink`: a failing case made smaller before it is saved. A
// greedy shrinker over the scenario's options (not rapidcheck's: a sweep case
// is a fixed scenario, not a generated one): each candidate changes one option
// toward the simplest value (tp/cp/dp to 1 or half, sp off, recompute none,
// graphs none, fewer layers, steps, microbatches, ...); a candidate that is a
// valid check scenario and still FAILs the same property becomes the case.
// Passes repeat until none helps or `max_candidates` checks were run (a count,
// not a time: the result is the same on every run).
#include <string>

#include "harness/checks/check.h"

namespace parity::sweep {

struct ShrinkResult {
  RunConfig scenario;            // the smallest failing scenario found
  checks::CheckOutcome outcome;  // its check
  int candidates = 0;            // checks run
  int accepted = 0;              // candidates that still failed (steps taken)
};

// `failing`: the case's scenario; `outcome`: its check (property_failed);
// `property`: the FAILed property to keep failing.
ShrinkResult shrink_failure(const RunConfig& failing, const checks::CheckOutcome& outcome,
                            const std::string& property, int max_candidates,
                            const LaunchOptions& options = {});

}  // namespace parity::sweep
