// What parity run and parity selfcheck share: the --report file.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "harness/backend/version.h"
#include "harness/base/files.h"
#include "harness/cli/commands.h"
#include "harness/runtime/failure_report.h"

namespace parity::cli {

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", seconds);
  return buf;
}

int launch_program(const CommandContext& ctx, const char* program, LaunchResult* result,
                   const LaunchOptions* options) {
  try {
    *result = launch(ctx.parsed.config, program, options ? *options : ctx.options);
  } catch (const ConfigError& e) {
    for (const ConfigViolation& v : e.violations()) ctx.err << format_for_cli(v) << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    ctx.err << "parity " << ctx.parsed.command
            << ": could not launch the ranks: " << one_line(e.what()) << "\n";
    return kExitRankFailure;
  }
  return -1;
}

bool is_terminal(const std::ostream& out) { return &out == &std::cout && ::isatty(STDOUT_FILENO); }

void print_rank_failure(const CommandContext& ctx, const LaunchResult& result) {
  for (const std::string& line : result.failure->lines()) ctx.err << line << "\n";
  if (result.failure->abandoned_threads && ctx.must_exit_now) *ctx.must_exit_now = true;
}

int printing_rank(const CommandContext& ctx) {
  if (ctx.parsed.config.launch != LaunchMode::env) return 0;
  EnvRank env_rank;
  read_env_rank(ctx.parsed.config, &env_rank, ctx.options.getenv);
  return env_rank.rank;
}

int write_launch_report(const CommandContext& ctx, const LaunchResult& result, int code) {
  const RunConfig& config = ctx.parsed.config;
  nlohmann::json report;
  report["command"] = ctx.parsed.command;
  report["build"] = version_json();
  report["exit_code"] = code;
  report["config"] = to_json(config);
  nlohmann::json launched = result.to_json();
  // The trace has its own file; the report keeps the per-rank summaries.
  for (nlohmann::json& r : launched["results"])
    if (r.is_object()) r.erase("trace");
  report["launch"] = std::move(launched);
  try {
    files::write_atomically(config.report, report.dump(2) + "\n");
  } catch (const std::exception& e) {
    ctx.err << "parity " << ctx.parsed.command << ": --report " << config.report << ": " << e.what()
            << "\n";
    if (code == kExitOk) code = kExitBadInput;
  }
  return code;
}

}  // namespace parity::cli
