#pragma once
// `parity sweep`'s options and outcome (docs/sweep.md, docs/cli.md).
#include <string>
#include <vector>

namespace parity::sweep {

struct SweepOptions {
  std::string matrix;              // MATRIX.json (empty with --merge)
  std::string out;                 // --out DIR
  bool resume = false;             // skip the cases DIR/results.jsonl already holds
  int jobs = 1;                    // cases run side by side
  int shard = 1, shards = 1;       // --shard K/N (1-based K): cases with index % N == K-1
  bool shrink = false;             // shrink each failure before saving it
  int shrink_steps = 20;           // candidates (checks) per failure
  std::string junit;               // --junit FILE ("" = none)
  std::vector<std::string> merge;  // --merge DIR... (then no MATRIX)
  std::string baseline;            // --baseline DIR: a stored sweep folder to compare with
  bool terminal = false;           // progress as one updating line (stdout is a TTY)
};

// How a sweep ended; the CLI maps it to the exit code.
enum class SweepOutcome {
  all_passed,     // 0: every case that ran passed
  some_failed,    // 1: a case failed (a property, or its ranks); a merge missing cases
  bad_input,      // 2: matrix file, folder or options
  could_not_run,  // 3: the sweep itself could not run (its folder cannot be written)
};
int exit_code(SweepOutcome outcome);

}  // namespace parity::sweep
