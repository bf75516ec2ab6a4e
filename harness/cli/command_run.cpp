// parity run: trains the model for --steps steps; per-step loss table (a row
// as every rank completes a step), the observation trace with --trace.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <ostream>

#include <nlohmann/json.hpp>

#include "harness/base/files.h"
#include "harness/base/status_line.h"
#include "harness/cli/commands.h"
#include "harness/cli/run_output.h"
#include "harness/driver/run_dump.h"
#include "harness/driver/training_step.h"
#include "harness/model/checkpoint.h"
#include "harness/runtime/step_rows.h"

namespace parity::cli {
namespace {

void print_run_header(const RunConfig& c, std::ostream& out) {
  out << "parity run: " << c.layers << " layer(s), hidden " << c.hidden << ", heads " << c.heads
      << ", ffn " << c.ffn_hidden << ", seq " << c.seq << ", micro-batch " << c.micro_batch << " x "
      << c.microbatches << " microbatch(es) per DP rank, vocab " << c.vocab << ", "
      << to_string(c.dtype) << ", " << to_string(c.norm) << ", " << to_string(c.activation);
  if (c.moe_experts > 0)
    out << ", MoE " << c.moe_experts << " experts top-" << c.moe_topk << " (layers " << c.moe_layers
        << ")";
  if (c.mtp_layers > 0) out << ", " << c.mtp_layers << " MTP depth(s)";
  out << "; " << c.world_size() << " rank(s) = tp " << c.tp << " x cp " << c.cp << " x dp " << c.dp
      << (c.pp > 1 ? " x pp " + std::to_string(c.pp) : "") << (c.sp ? " (sp)" : "")
      << (c.vpp > 1  ? ", " + std::to_string(c.vpp) + " chunks per stage (interleaved 1F1B)"
          : c.pp > 1 ? ", 1F1B"
                     : "")
      << (c.moe_experts > 0 ? ", ep " + std::to_string(c.ep) : "") << ", launch "
      << to_string(c.launch) << "; " << c.steps << " step(s), "
      << (c.optimizer == OptimizerKind::adam ? "Adam" : "SGD") << " lr " << c.lr << ", seed "
      << c.seed << std::endl;
}

// --dump: the ranks write into DIR.partial; this adds manifest.json and
// trace.jsonl, then renames it over DIR. "" when done, else why not.
std::string finish_dump(const RunConfig& c, const LaunchResult& result) {
  const std::string staging = dump_staging_path(c.dump);
  // Every rank lists what it wrote (rank 0 the shared files, each rank its observations).
  nlohmann::json files = nlohmann::json::object();
  for (std::size_t rank = 0; rank < result.results.size(); ++rank) {
    const nlohmann::json& r = result.results[rank];
    if (!r.is_object() || !r.contains("dump") || !r["dump"].is_object())
      return "rank " + std::to_string(rank) + " returned no dump";
    files.update(r["dump"]);
  }
  if (files.empty()) return "the ranks returned no dump";
  const std::string jsonl = trace_jsonl(result);
  files["trace.jsonl"] = {{"holds", "every rank's observations, JSONL (docs/trace-format.md)"},
                          {"records", std::count(jsonl.begin(), jsonl.end(), '\n')}};
  const nlohmann::json manifest = {
      {"format", "parity-dump"}, {"version", 1}, {"scenario", to_json(c)}, {"files", files}};
  try {
    files::write_atomically(staging + "/trace.jsonl", jsonl);
    files::write_atomically(staging + "/manifest.json", manifest.dump(2) + "\n");
  } catch (const std::exception& e) {
    return e.what();
  }
  if (!files::remove_tree(c.dump)) return "cannot remove the old " + c.dump;
  if (std::rename(staging.c_str(), c.dump.c_str()) != 0)
    return "cannot rename " + staging + " to " + c.dump + ": " + std::strerror(errno);
  return "";
}

// The progress line: "run: 3/10 steps, elapsed 0:12, ETA 0:28".
// `first`: the run's first step (a resumed run's checkpoint step).
std::string run_progress_text(std::int64_t done, std::int64_t first, std::int64_t total,
                              double elapsed) {
  const std::string eta =
      done > first ? clock_text(elapsed / double(done - first) * double(total - done)) : "?";
  return "run: " + std::to_string(done) + "/" + std::to_string(total) + " steps, elapsed " +
         clock_text(elapsed) + ", ETA " + eta;
}

}  // namespace

int run_training_command(const CommandContext& ctx) {
  const RunConfig& config = ctx.parsed.config;
  const int rank = printing_rank(ctx);
  if (rank == 0) print_run_header(config, ctx.out);
  register_model_program();
  // A resumed run starts at its checkpoint's step (checked before the launch).
  std::int64_t first_step = 0;
  if (!config.resume.empty()) {
    try {
      first_step = checkpoint::saved_step(config.resume);
    } catch (const std::exception& e) {
      ctx.err << "parity run: --resume " << config.resume << ": " << e.what() << "\n";
      return kExitBadInput;
    }
    if (rank == 0)
      ctx.out << "resuming from " << config.resume << " at step " << first_step << std::endl;
  }
  if (!config.dump.empty() && rank == 0) {
    const std::string staging = dump_staging_path(config.dump);
    files::remove_tree(staging);
    try {
      files::create_directories(staging);
    } catch (const std::exception& e) {
      ctx.err << "parity run: --dump " << config.dump << ": " << e.what() << "\n";
      return kExitBadInput;
    }
  }
  // The table's rows print as every rank completes a step, the rest from the
  // results at the end (rows a rank's ring lost). Not in env mode: this
  // process sees its own rank only, so the table comes at the end.
  const bool streamed = config.launch != LaunchMode::env;
  StepRowStream stream(first_step);
  std::atomic<std::int64_t> steps_done{first_step};
  bool table_started = false;
  StatusLine line(ctx.out, streamed && is_terminal(ctx.out), [&](double elapsed) {
    return run_progress_text(steps_done.load(), first_step, config.steps, elapsed);
  });
  LaunchOptions options = ctx.options;
  if (streamed) {
    options.watcher = [&](const std::vector<RankStatus>& ranks) {
      const std::vector<StepRow> rows = stream.poll(ranks);
      if (rows.empty() && stream.steps_done() == steps_done.load()) return;
      steps_done.store(stream.steps_done());
      line.update([&](std::ostream& out) {
        if (!rows.empty() && !table_started) out << loss_table_header();
        table_started = table_started || !rows.empty();
        for (const StepRow& row : rows) out << format_loss_row(row);
      });
    };
  }
  line.update();  // on a terminal: the line from the start
  LaunchResult result;
  const int launched = launch_program(ctx, kModelProgram, &result, &options);
  line.finish(StatusLine::Finish::erase);
  if (launched >= 0) return launched;

  int code = kExitOk;
  if (!result.ok()) {
    print_rank_failure(ctx, result);
    code = kExitRankFailure;
  } else if (rank != 0) {
    ctx.out << "rank " << rank << ": run done (rank 0 prints the table and writes the trace)"
            << std::endl;
    return code;
  } else {
    if (table_started) {
      for (const StepRow& row : loss_table_rows(result))
        if (row.step >= stream.next_step()) ctx.out << format_loss_row(row);
    } else {
      ctx.out << format_loss_table(result);
    }
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
    if (!config.dump.empty()) {
      const std::string why = finish_dump(config, result);
      if (!why.empty()) {
        ctx.err << "parity run: --dump " << config.dump << ": " << why << "\n";
        if (code == kExitOk) code = kExitBadInput;
      } else {
        trace_note += ", dump " + config.dump;
      }
    }
    if (!config.save_checkpoint.empty() && !result.results.empty() &&
        result.results[0].contains("checkpoint"))
      trace_note += ", checkpoint " + result.results[0]["checkpoint"].get<std::string>();
    ctx.out << "run " << (code == kExitOk ? "done" : "FAILED") << ": " << result.world_size
            << " rank(s), " << config.steps << " step(s)" << trace_note << ", "
            << seconds_text(result.wall_seconds) << " s (" << result.rendezvous << ")" << std::endl;
  }
  if (!config.report.empty() && rank == 0) code = write_launch_report(ctx, result, code);
  return code;
}

}  // namespace parity::cli
