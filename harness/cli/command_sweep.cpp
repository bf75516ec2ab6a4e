// parity sweep MATRIX.json --out DIR, and parity sweep --merge DIR... --out DIR
// (harness/sweep/run_sweep.h, docs/sweep.md).
#include "harness/cli/commands.h"
#include "harness/sweep/run_sweep.h"

namespace parity::cli {

int run_sweep_command(const CommandContext& ctx) {
  sweep::SweepOptions o = ctx.parsed.sweep;
  // One updating line only on a terminal; CI logs get a line per case.
  o.terminal = is_terminal(ctx.out);
  const sweep::SweepOutcome outcome =
      o.merge.empty() ? sweep::run_sweep(o, ctx.out, ctx.err, ctx.options, ctx.must_exit_now)
                      : sweep::merge_sweeps(o, ctx.out, ctx.err);
  return sweep::exit_code(outcome);
}

}  // namespace parity::cli
