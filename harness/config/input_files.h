#pragma once
// --load-weights and --load-batch checked before any rank starts, so a bad file
// is bad input (exit 2) with one line per problem naming the key or field and
// both shapes, not a rank failure. docs/weights.md.
#include <vector>

#include "harness/config/run_config.h"

namespace parity {

// Reads the files of a validated config; empty when they fit the model (or none
// is given). Builds the model once on one rank with the weights as its source,
// so the parameter list is the model's own.
std::vector<ConfigViolation> check_input_files(const RunConfig& config);

// Every file the run or check will write (--report, --trace, --dump) checked
// before the first rank starts: a path that cannot be written is bad input
// (exit 2) now, not after minutes of work.
std::vector<ConfigViolation> check_output_files(const RunConfig& config);

}  // namespace parity
