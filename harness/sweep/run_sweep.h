#pragma once
// `parity sweep MATRIX.json --out DIR` and `parity sweep --merge DIR... --out
// DIR` (docs/sweep.md). Cases run in-process through checks::execute_check,
// `jobs` of them side by side on threads (each case's ranks are threads of
// their own; a check keeps no global state: its rendezvous, transport and
// code-path fault bits are per launch or per thread).
#include <iosfwd>
#include <string>

#include "harness/config/launch_mapping.h"
#include "harness/sweep/sweep_options.h"

namespace parity::sweep {

// `must_exit_now` (may be null) is set when a case had to leave rank threads
// running: the process should _Exit once the sweep has written its files.
SweepOutcome run_sweep(const SweepOptions& options, std::ostream& out, std::ostream& err,
                       const LaunchOptions& launch = {}, bool* must_exit_now = nullptr);

// The command that continues this sweep (what Ctrl-C prints):
// "parity sweep M.json --out DIR [--shard K/N] [--jobs N] ... --resume",
// each path quoted for the shell when it needs it.
std::string resume_command(const SweepOptions& options);

// Combines sweep folders of one matrix into options.out: matrix.json,
// results.jsonl (index order), failures/ (copied; repro commands point at the
// new folder), summary.json, results.csv, --junit. bad_input when the folders
// hold different matrices or the same case twice; some_failed when a case
// failed or a case of the matrix is in none of the folders.
SweepOutcome merge_sweeps(const SweepOptions& options, std::ostream& out, std::ostream& err);

}  // namespace parity::sweep
