#pragma once
// `parity mutants`: the property suite against each code-path fault
// (harness/faults/code_path_faults.h). docs/property-suite.md.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace parity::scenarios {

struct MutantsOptions {
  std::vector<std::string> faults;  // empty = every code-path fault
  int cases = 40;                   // generated scenarios per fault before "not caught"
  std::uint64_t seed = 20261203;    // rapidcheck seed: the table is deterministic
  int shrink_steps = 60;            // shrink candidates tried per fault (a count: reproducible)
  std::string report;               // JSON report path; "" = none
};

// How a hunt ended; the CLI maps it to the exit code (docs/cli.md).
enum class MutantsOutcome {
  all_caught,         // exit 0
  some_missed,        // exit 1: a fault no property caught
  report_unwritable,  // exit 2: every fault caught, but --report could not be written
};

// For each fault: generated scenarios (gen_scenario) with the fault injected,
// checked like `parity check`, until some property FAILs; rapidcheck shrinks
// (bounded by shrink_steps candidates); prints one row per fault.
MutantsOutcome run_mutants(const MutantsOptions& options, std::ostream& out, std::ostream& err);

}  // namespace parity::scenarios
