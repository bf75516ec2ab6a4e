// parity mutants: the runner lives in parity_scenarios (it needs rapidcheck);
// the parity binary installs it, so the harness library does not depend on it.
#include <ostream>

#include "harness/cli/commands.h"

namespace parity::cli {
namespace {
MutantsRunner g_mutants_runner = nullptr;
}  // namespace

void set_mutants_runner(MutantsRunner runner) { g_mutants_runner = runner; }

int run_mutants_command(const CommandContext& ctx) {
  if (!g_mutants_runner) {
    ctx.err << "parity mutants is not available in this program (no mutants runner installed)\n";
    return kExitBadInput;
  }
  return g_mutants_runner(ctx.parsed.mutants, ctx.out, ctx.err);
}

}  // namespace parity::cli
