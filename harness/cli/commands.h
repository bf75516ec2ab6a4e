#pragma once
// One handler per `parity` command (command_*.cpp), called by the dispatcher in
// cli.cpp with a parsed, validated command line.
#include <iosfwd>
#include <string>
#include <vector>

#include "harness/cli/cli.h"

namespace parity::cli {

struct CommandContext {
  const ParsedCommand& parsed;
  std::ostream& out;
  std::ostream& err;
  const LaunchOptions& options;
  bool* must_exit_now;  // may be null
};

// The commands `parity --help` lists, in its order.
struct CommandInfo {
  std::string name;
  std::string help;
  int (*handler)(const CommandContext&);
};
const std::vector<CommandInfo>& command_table();

int run_check_command(const CommandContext& ctx);      // check SCENARIO
int run_repro_command(const CommandContext& ctx);      // repro FILE
int run_training_command(const CommandContext& ctx);   // run
int run_selfcheck_command(const CommandContext& ctx);  // selfcheck, check --self-check
int run_mutants_command(const CommandContext& ctx);    // mutants
int run_diff_command(const CommandContext& ctx);       // diff A B
int run_sweep_command(const CommandContext& ctx);      // sweep MATRIX | --merge DIR...
int run_list_command(const CommandContext& ctx);       // list WHAT

// What `parity list` lists: faults, properties, metrics, scenarios, options.
const std::vector<std::string>& list_kinds();

// run and selfcheck: launches `program` on the configured ranks (with
// `options`, default ctx.options). Returns -1 and fills `result` when it
// launched; else prints why and returns the exit code.
int launch_program(const CommandContext& ctx, const char* program, LaunchResult* result,
                   const LaunchOptions* options = nullptr);
// Whether `out` is this process's standard output and that is a terminal:
// progress lines go there only then (harness/base/status_line.h).
bool is_terminal(const std::ostream& out);
// The failed ranks' report lines on err; sets *must_exit_now for abandoned threads.
void print_rank_failure(const CommandContext& ctx, const LaunchResult& result);
// The rank of this process under --launch env (0 otherwise): rank 0 prints.
int printing_rank(const CommandContext& ctx);

// run and selfcheck: writes --report (the command, its exit code, the config,
// the launch result); returns the exit code after a write failure.
int write_launch_report(const CommandContext& ctx, const LaunchResult& result, int code);

// "1.23"
std::string seconds_text(double seconds);

}  // namespace parity::cli
