// The dispatcher: the command table and run_command_line. Each command's
// handler is in its own command_*.cpp; parsing is in parse_command_line.cpp.
#include "harness/cli/cli.h"

#include <ostream>

#include "harness/checks/property.h"
#include "harness/cli/commands.h"

namespace parity::cli {

namespace {

// check's blurb names every registered property (the registry, not a copy of it).
std::string check_help() {
  std::string names;
  for (const checks::Property* p : checks::registered_properties())
    names += (names.empty() ? "" : ", ") + std::string(p->name());
  return "the main job: run a scenario (the embedded default, or SCENARIO.json; flags override "
         "its values) against its single-rank, no-recompute and eager references and evaluate "
         "the properties (" +
         names + "; parity list properties says what each needs)";
}

}  // namespace

const std::vector<CommandInfo>& command_table() {
  // Only commands that exist are listed (a placeholder would be a stub that
  // --help advertises).
  static const std::vector<CommandInfo> c = {
      {"check", check_help(), &run_check_command},
      {"selfcheck",
       "the runtime self-check: every collective on every group (also: check --self-check)",
       &run_selfcheck_command},
      {"run",
       "train the model for --steps steps on the options' scenario: per-step loss table, "
       "observation trace with --trace",
       &run_training_command},
      {"repro",
       "replay a saved scenario file (PARITY_SAVE_FAILURES, scenarios/*.json): the same runs, "
       "table and exit codes as parity check FILE",
       &run_repro_command},
      {"mutants",
       "for each code-path fault: search generated scenarios with it injected until a property "
       "FAILs, shrink, and print fault, caught, by which property, the shrunk scenario, seconds "
       "(docs/property-suite.md)",
       &run_mutants_command},
      {"diff",
       "compare two observation traces (parity run --trace, tools/megatron/golden.py, or a "
       "parity run --dump folder's trace.jsonl) site by site: record counts and values within "
       "the dtype's tolerance; prints the first divergence (exit 1)",
       &run_diff_command},
      {"sweep",
       "run parity check over every case of a matrix of scenario options (MATRIX.json: axes, "
       "base, exclude, include) into --out DIR: crash-safe results.jsonl, --resume, --jobs, "
       "--shard K/N, --merge DIR..., summary.json, results.csv, --junit, failures/ for parity "
       "repro (docs/sweep.md)",
       &run_sweep_command},
      {"list",
       "list what parity knows, one row each with a one-line doc and what it needs: faults "
       "(--inject, mutants --fault), properties, metrics (--metrics), scenarios (files for "
       "parity check), options (every run option: type, default, rule)",
       &run_list_command},
  };
  return c;
}

int run_command_line(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                     const LaunchOptions& options, bool* must_exit_now) {
  const ParsedCommand parsed = parse_command_line(argc, argv, out, options);
  if (parsed.help_shown) return kExitOk;
  if (!parsed.errors.empty()) {
    for (const std::string& e : parsed.errors) err << e << "\n";
    return kExitBadInput;
  }
  const CommandContext ctx{parsed, out, err, options, must_exit_now};
  for (const CommandInfo& c : command_table())
    if (c.name == parsed.command) return c.handler(ctx);
  err << "parity: unknown command \"" << parsed.command << "\" (see parity --help)\n";
  return kExitBadInput;
}

}  // namespace parity::cli
