// parity mutants: the property suite against every code-path fault
// (scenarios/mutants.h); the CLI maps its outcome to the exit code.
#include <ostream>

#include "harness/cli/commands.h"
#include "scenarios/mutants.h"

namespace parity::cli {

int run_mutants_command(const CommandContext& ctx) {
  switch (scenarios::run_mutants(ctx.parsed.mutants, ctx.out, ctx.err)) {
    case scenarios::MutantsOutcome::all_caught:
      return kExitOk;
    case scenarios::MutantsOutcome::some_missed:
      return kExitPropertyFailed;
    case scenarios::MutantsOutcome::report_unwritable:
      return kExitBadInput;
  }
  return kExitBadInput;
}

}  // namespace parity::cli
