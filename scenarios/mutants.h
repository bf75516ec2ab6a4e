#pragma once
// `parity mutants`: the property suite against each code-path fault
// (harness/faults/code_path_faults.h). docs/property-suite.md.
#include <iosfwd>

#include "harness/cli/cli.h"

namespace parity::scenarios {

// For each fault: generated scenarios (gen_scenario) with the fault injected,
// checked like `parity check`, until some property FAILs; rapidcheck shrinks
// (bounded by shrink_steps candidates); prints one row per fault. Exit 1 when a fault
// is not caught, 2 when the report cannot be written.
int run_mutants(const cli::MutantsOptions& options, std::ostream& out, std::ostream& err);

}  // namespace parity::scenarios
