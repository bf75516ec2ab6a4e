// parity run: trains the model for --steps steps; per-step loss table, the
// observation trace with --trace.
#include <algorithm>
#include <ostream>

#include "harness/base/files.h"
#include "harness/cli/commands.h"
#include "harness/cli/run_output.h"
#include "harness/driver/training_step.h"

namespace parity::cli {
namespace {

void print_run_header(const RunConfig& c, std::ostream& out) {
  out << "parity run: " << c.layers << " layer(s), hidden " << c.hidden << ", heads " << c.heads
      << ", ffn " << c.ffn_hidden << ", seq " << c.seq << ", micro-batch " << c.micro_batch << " x "
      << c.microbatches << " microbatch(es) per DP rank, vocab " << c.vocab << ", "
      << to_string(c.dtype) << ", " << to_string(c.norm) << ", " << to_string(c.activation) << "; "
      << c.world_size() << " rank(s) = tp " << c.tp << " x cp " << c.cp << " x dp " << c.dp
      << (c.sp ? " (sp)" : "") << ", launch " << to_string(c.launch) << "; " << c.steps
      << " step(s), SGD lr " << c.lr << ", seed " << c.seed << std::endl;
}

}  // namespace

int run_training_command(const CommandContext& ctx) {
  const RunConfig& config = ctx.parsed.config;
  const int rank = printing_rank(ctx);
  if (rank == 0) print_run_header(config, ctx.out);
  register_model_program();
  LaunchResult result;
  if (const int code = launch_program(ctx, kModelProgram, &result); code >= 0) return code;

  int code = kExitOk;
  if (!result.ok()) {
    print_rank_failure(ctx, result);
    code = kExitRankFailure;
  } else if (rank != 0) {
    ctx.out << "rank " << rank << ": run done (rank 0 prints the table and writes the trace)"
            << std::endl;
    return code;
  } else {
    ctx.out << format_loss_table(result);
    const std::string disagreement = loss_disagreement(result);
    if (!disagreement.empty()) {
      ctx.err << "parity run: ranks disagree on the loss: " << disagreement << "\n";
      code = kExitPropertyFailed;
    }
    std::string trace_note;
    if (!config.trace.empty()) {
      const std::string jsonl = trace_jsonl(result);
      const long long lines = static_cast<long long>(std::count(jsonl.begin(), jsonl.end(), '\n'));
      try {
        files::write_atomically(config.trace, jsonl);
        trace_note = ", trace " + config.trace + " (" + std::to_string(lines) + " records)";
      } catch (const std::exception& e) {
        ctx.err << "parity run: --trace " << config.trace << ": " << e.what() << "\n";
        if (code == kExitOk) code = kExitBadInput;
      }
    }
    ctx.out << "run " << (code == kExitOk ? "done" : "FAILED") << ": " << result.world_size
            << " rank(s), " << config.steps << " step(s)" << trace_note << ", "
            << seconds_text(result.wall_seconds) << " s (" << result.rendezvous << ")" << std::endl;
  }
  if (!config.report.empty() && rank == 0) code = write_launch_report(ctx, result, code);
  return code;
}

}  // namespace parity::cli
