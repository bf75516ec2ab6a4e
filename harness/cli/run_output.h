#pragma once
// `parity run`'s output formatting: the per-step loss table, the cross-rank
// loss agreement line and the trace JSONL, from the launcher's per-rank results
// (the rank program "model", harness/driver/training_step.h). The table's rows
// print as the steps complete (step_rows.h) and from the results at the end;
// both go through format_loss_row, so the two agree byte for byte.
#include <cstdint>
#include <string>
#include <vector>

namespace parity {

struct LaunchResult;
struct StepRow;

// The table's column heads, one line.
std::string loss_table_header();
// One step's line: the loss (17 significant digits), observations, seconds.
std::string format_loss_row(const StepRow& row);
// The steps' rows from the ranks' results: the loss of the first rank with
// steps, observations summed over ranks, the slowest rank's seconds. Empty
// results are skipped.
std::vector<StepRow> loss_table_rows(const LaunchResult& result);
// The header and one row per step; "(no rank result)" when no rank has steps.
std::string format_loss_table(const LaunchResult& result);
// "" when every rank reported the same loss for every step, else a one-line
// description of the first disagreement.
std::string loss_disagreement(const LaunchResult& result);
// Every rank's trace records as JSONL (docs/trace-format.md), sorted by (rank, seq).
std::string trace_jsonl(const LaunchResult& result);

}  // namespace parity
