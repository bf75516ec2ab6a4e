#pragma once
// The `parity` command line: subcommands check, selfcheck, run, repro, mutants, diff,
// sweep, list; the run options (RunConfig's field table), mapped into a
// RunConfig and validated by validate_run_config. The hidden subcommands
// `__rank-worker` and `__agent-store` are handled by main() before this.
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/launch_mapping.h"
#include "harness/config/run_config.h"
#include "harness/sweep/sweep_options.h"
#include "scenarios/mutants.h"

namespace parity::cli {

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitPropertyFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitRankFailure = 3;

using scenarios::MutantsOptions;  // `parity mutants`: its options (scenarios/mutants.h)

// `parity diff A B`: its operands and options.
struct DiffOptions {
  std::string a, b;                // the two trace files (or parity run --dump folders)
  std::vector<std::string> kinds;  // --kinds: compare only these kinds (empty = all)
};

// `parity list WHAT [--json]`: faults, properties, metrics, scenarios or options.
struct ListOptions {
  std::string what;
  bool json = false;
};

struct ParsedCommand {
  std::string command;  // "check", "run", ... ("" for --help alone)
  RunConfig config;
  std::vector<std::string> errors;  // one line each: CLI11 errors or violations
  bool help_shown = false;          // --help was printed (exit 0)
  // check: "embedded default" or the scenario file's path; self_check is set by
  // `check --self-check` (the command is then "selfcheck").
  std::string scenario_source;
  // check/repro with a scenario file: its "expect" (property -> PASS/FAIL/SKIP)
  // and its "about" (repro prints it; null when absent).
  std::map<std::string, std::string> expect;
  nlohmann::json about;
  // check/repro --baseline FILE: the stored report, read and checked while
  // parsing (a bad file is bad input); the path is empty without the flag.
  std::string baseline_path;
  nlohmann::json baseline_report;
  MutantsOptions mutants;     // mutants: its options
  DiffOptions diff;           // diff: its options
  ListOptions list;           // list: what to list
  sweep::SweepOptions sweep;  // sweep: its options (harness/sweep/sweep_options.h)
};

// Parses and validates (config rules; env mode's environment too). `argv[0]`
// is the program name. Help text goes to `out`.
ParsedCommand parse_command_line(int argc, const char* const* argv, std::ostream& out,
                                 const LaunchOptions& options = {});

// Runs the command line; returns the exit code. `must_exit_now` is set when
// rank threads had to be left running (the caller should _Exit with the code).
int run_command_line(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
                     const LaunchOptions& options = {}, bool* must_exit_now = nullptr);

}  // namespace parity::cli
