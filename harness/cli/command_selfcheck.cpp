// parity selfcheck (= check --self-check): every collective on every group.
#include <ostream>
#include <string>

#include "harness/cli/commands.h"
#include "harness/runtime/self_check.h"

namespace parity::cli {

int run_selfcheck_command(const CommandContext& ctx) {
  const RunConfig& config = ctx.parsed.config;
  const int rank = printing_rank(ctx);
  if (rank == 0) {
    ctx.out << "parity selfcheck: runtime self-check on " << config.world_size() << " rank(s) = tp "
            << config.tp << " x cp " << config.cp << " x dp " << config.dp
            << (config.pp > 1 ? " x pp " + std::to_string(config.pp) : std::string()) << ", launch "
            << to_string(config.launch) << ", timeout " << config.timeout << " s";
    if (!config.inject.empty()) {
      ctx.out << ", inject";
      for (const std::string& i : config.inject) ctx.out << " " << i;
    }
    ctx.out << std::endl;
  }
  LaunchResult result;
  if (const int code = launch_program(ctx, kSelfCheckProgram, &result); code >= 0) return code;

  int code = kExitOk;
  if (!result.ok()) {
    print_rank_failure(ctx, result);
    code = kExitRankFailure;
  } else if (rank != 0) {
    ctx.out << "rank " << rank << ": self-check done (rank 0 prints the table)" << std::endl;
    return self_check_passed(result) ? kExitOk : kExitPropertyFailed;
  } else {
    ctx.out << format_self_check_table(result);
    int checks = 0;
    for (const nlohmann::json& r : result.results)
      if (r.is_object()) checks += r.value("checks", 0);
    const bool passed = self_check_passed(result);
    ctx.out << "self-check " << (passed ? "passed" : "FAILED") << ": " << result.world_size
            << " rank(s), " << checks << " checks, " << seconds_text(result.wall_seconds) << " s ("
            << result.rendezvous << ")" << std::endl;
    if (!passed) code = kExitPropertyFailed;
  }
  if (!config.report.empty() && rank == 0) code = write_launch_report(ctx, result, code);
  return code;
}

}  // namespace parity::cli
