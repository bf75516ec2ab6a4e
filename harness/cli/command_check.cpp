// parity check SCENARIO and parity repro FILE: the property check of a
// scenario (harness/checks/check.h).
#include <ostream>

#include "harness/checks/check.h"
#include "harness/cli/commands.h"

namespace parity::cli {

int run_check_command(const CommandContext& ctx) {
  checks::BaselineInput baseline{ctx.parsed.baseline_path, ctx.parsed.baseline_report};
  return checks::exit_code(
      checks::run_check(ctx.parsed.config, ctx.parsed.scenario_source, ctx.out, ctx.err,
                        ctx.options, ctx.must_exit_now, ctx.parsed.expect,
                        baseline.path.empty() ? nullptr : &baseline, is_terminal(ctx.out)));
}

int run_repro_command(const CommandContext& ctx) {
  // What the file says about itself (the failing property, its reason, the
  // rapidcheck reproduce string), then the same check.
  if (!ctx.parsed.about.is_null())
    ctx.out << "parity repro: " << ctx.parsed.about.dump() << std::endl;
  return run_check_command(ctx);
}

}  // namespace parity::cli
