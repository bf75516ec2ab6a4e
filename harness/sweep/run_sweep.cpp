#include "harness/sweep/run_sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <ostream>
#include <set>
#include <thread>

#include "harness/base/files.h"
#include "harness/sweep/baseline_folder.h"
#include "harness/sweep/case_record.h"
#include "harness/sweep/folder.h"
#include "harness/sweep/interrupt.h"
#include "harness/sweep/progress.h"
#include "harness/sweep/results.h"
#include "harness/sweep/shrink.h"
#include "harness/sweep/summary.h"

namespace parity::sweep {
namespace {

using Clock = std::chrono::steady_clock;

// The cases this run owes: its shard's, less those already recorded.
std::vector<const SweepCase*> cases_to_run(const Matrix& m, const SweepOptions& o,
                                           const std::set<std::string>& recorded) {
  std::vector<const SweepCase*> out;
  for (const SweepCase& c : m.cases)
    if (c.index % o.shards == o.shard - 1 && !recorded.count(c.id)) out.push_back(&c);
  return out;
}

// Why a matrix (or its shard) gives no case to run, one line; "" when it gives one.
std::string why_nothing_to_run(const Matrix& m, const SweepOptions& o) {
  if (m.cases.empty()) {
    std::string why = "no case to run: every case of the matrix's " + std::to_string(m.expansion) +
                      " is invalid or excluded (" + std::to_string(m.invalid.size()) +
                      " invalid, " + std::to_string(m.excluded) + " excluded)";
    std::vector<std::string> reasons;  // distinct, in case order
    for (const InvalidCase& i : m.invalid)
      if (std::find(reasons.begin(), reasons.end(), i.reason) == reasons.end())
        reasons.push_back(i.reason);
    for (std::size_t k = 0; k < reasons.size() && k < 3; ++k) why += (k ? "; " : ": ") + reasons[k];
    if (reasons.size() > 3) why += "; and " + std::to_string(reasons.size() - 3) + " more reasons";
    return why;
  }
  for (const SweepCase& c : m.cases)
    if (c.index % o.shards == o.shard - 1) return "";
  return "--shard " + std::to_string(o.shard) + "/" + std::to_string(o.shards) +
         ": no case to run: none of the matrix's " + std::to_string(m.cases.size()) +
         " valid case(s) has an index % " + std::to_string(o.shards) +
         " == " + std::to_string(o.shard - 1) + " (fewer shards, or a larger matrix)";
}

// The first FAILed property's name ("" when none).
std::string first_failed(const checks::CheckOutcome& o) {
  for (const checks::PropertyResult& p : o.report.properties)
    if (p.status == checks::Status::fail) return p.name;
  return "";
}

struct CaseContext {
  const Matrix& matrix;
  const SweepOptions& options;
  const LaunchOptions& launch;
  ResultsFile& results;
  Progress& progress;
  std::string invocation;
  Clock::time_point start;  // this invocation's
};

// Runs one case, saves its failure file (shrunk first with --shrink) and
// appends its record. Throws std::runtime_error when a file cannot be written.
bool run_case(const CaseContext& ctx, const SweepCase& c) {
  const auto start = Clock::now();
  const checks::CheckOutcome outcome =
      checks::execute_check(c.config, ctx.options.matrix + " [" + c.id + "]", ctx.launch);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::string failure_file;
  if (outcome.verdict != checks::CheckVerdict::passed) {
    RunConfig saved = c.config;
    const checks::CheckOutcome* saved_outcome = &outcome;
    std::string note;
    ShrinkResult shrunk;
    const std::string property = first_failed(outcome);
    if (ctx.options.shrink && !property.empty()) {
      shrunk = shrink_failure(c.config, outcome, property, ctx.options.shrink_steps, ctx.launch);
      saved = shrunk.scenario;
      saved_outcome = &shrunk.outcome;
      note = "by parity sweep --shrink: " + std::to_string(shrunk.accepted) + " step(s) in " +
             std::to_string(shrunk.candidates) + " candidate(s), still failing " + property;
    }
    failure_file = failure_file_name(c);
    files::create_directories(ctx.options.out + "/failures");
    files::write_atomically(
        ctx.options.out + "/" + failure_file,
        failure_scenario(ctx.matrix, ctx.options.matrix, c, saved, *saved_outcome, note).dump(2) +
            "\n");
  }
  const RecordedBy by{ctx.invocation,
                      std::chrono::duration<double>(Clock::now() - ctx.start).count()};
  ctx.results.append(
      case_record(ctx.matrix, c, outcome, seconds, ctx.options.out, failure_file, by));
  ctx.progress.finished(c.id, outcome_name(outcome.verdict), seconds);
  return outcome.must_exit_now;
}

// A word as the shell reads it back: quoted unless it is plain.
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_./=:,@%+-") == std::string::npos;
  if (plain) return word;
  std::string out = "'";
  for (char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace

std::string resume_command(const SweepOptions& o) {
  std::string cmd = "parity sweep " + shell_word(o.matrix) + " --out " + shell_word(o.out);
  if (o.shards > 1) cmd += " --shard " + std::to_string(o.shard) + "/" + std::to_string(o.shards);
  if (o.jobs != 1) cmd += " --jobs " + std::to_string(o.jobs);
  if (o.shrink) cmd += " --shrink --shrink-steps " + std::to_string(o.shrink_steps);
  if (!o.junit.empty()) cmd += " --junit " + shell_word(o.junit);
  if (!o.baseline.empty()) cmd += " --baseline " + shell_word(o.baseline);
  return cmd + " --resume";
}

SweepOutcome run_sweep(const SweepOptions& o, std::ostream& out, std::ostream& err,
                       const LaunchOptions& launch, bool* must_exit_now) {
  const auto start = Clock::now();
  Matrix matrix;
  std::set<std::string> recorded;
  std::optional<BaselineFolder> baseline;
  try {
    matrix = read_matrix_file(o.matrix);
    if (!o.baseline.empty()) baseline = read_baseline_folder(o.baseline, err);
    const bool started = files::exists(matrix_copy_path(o.out));
    if (started && !o.resume) {
      err << "parity sweep: --out " << o.out
          << ": holds a sweep already (matrix.json): pass --resume to continue it, or another "
             "folder\n";
      return SweepOutcome::bad_input;
    }
    if (started) {
      const Matrix held = read_folder_matrix(o.out);
      if (held.digest != matrix.digest) {
        err << "parity sweep: --resume " << o.out << ": its matrix digest " << held.digest
            << " differs from " << o.matrix << "'s " << matrix.digest
            << " (a folder holds the results of one matrix)\n";
        return SweepOutcome::bad_input;
      }
      for (const nlohmann::ordered_json& r : read_folder_cases(o.out, matrix.digest, err))
        recorded.insert(r.value("case", ""));
    }
  } catch (const std::exception& e) {
    err << "parity sweep: " << e.what() << "\n";
    return SweepOutcome::bad_input;
  }
  // A sweep that can run nothing is no pass; outputs are checked before any
  // case runs, so a bad path never costs the sweep's time.
  if (const std::string why = why_nothing_to_run(matrix, o); !why.empty()) {
    err << "parity sweep: " << o.matrix << ": " << why << "\n";
    return SweepOutcome::bad_input;
  }
  if (!o.junit.empty())
    if (const std::string why = cannot_write_file(o.junit); !why.empty()) {
      err << "parity sweep: --junit " << o.junit << ": cannot be written: " << why
          << " (output paths are checked before any case runs)\n";
      return SweepOutcome::bad_input;
    }
  if (const std::string why = cannot_write_folder(o.out); !why.empty()) {
    err << "parity sweep: --out " << o.out << ": cannot be written: " << why
        << " (output paths are checked before any case runs)\n";
    return SweepOutcome::bad_input;
  }
  const std::vector<const SweepCase*> todo = cases_to_run(matrix, o, recorded);
  const std::string shard =
      o.shards > 1 ? std::to_string(o.shard) + "/" + std::to_string(o.shards) : "";
  out << "parity sweep " << o.matrix << " (matrix " << matrix.digest << "): " << matrix.cases.size()
      << " case(s), " << matrix.excluded << " excluded, " << matrix.invalid.size() << " invalid"
      << (shard.empty() ? "" : "; shard " + shard) << "; " << todo.size() << " to run"
      << (recorded.empty() ? "" : ", " + std::to_string(recorded.size()) + " already recorded")
      << ", " << o.jobs << " job(s), results in " << o.out << std::endl;

  std::atomic<bool> abandoned{false};
  std::string write_error;
  const std::string invocation = invocation_id();
  try {
    if (!files::exists(matrix_copy_path(o.out)))
      files::write_atomically(matrix_copy_path(o.out), matrix.source.dump(2) + "\n");
    ResultsFile results(results_path(o.out));
    // Ctrl-C stops at once: every finished case is in results.jsonl already.
    const InterruptMessage on_ctrl_c(
        "\nparity sweep: interrupted (SIGINT); the finished cases are in " + results_path(o.out) +
        "; to continue: " + resume_command(o) + "\n");
    Progress progress(out, static_cast<int>(todo.size()), o.terminal);
    const CaseContext ctx{matrix, o, launch, results, progress, invocation, start};
    std::atomic<std::size_t> next{0};
    std::mutex error_mutex;
    // Workers take the next case in index order; a write error stops them all.
    auto worker = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < todo.size();) {
        try {
          if (run_case(ctx, *todo[i])) abandoned = true;
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (write_error.empty()) write_error = e.what();
          next = todo.size();
        }
      }
    };
    std::vector<std::thread> threads;
    for (int j = 1; j < o.jobs && j < static_cast<int>(todo.size()); ++j)
      threads.emplace_back(worker);
    worker();
    for (std::thread& t : threads) t.join();
    progress.done();
  } catch (const std::exception& e) {
    if (write_error.empty()) write_error = e.what();
  }
  if (abandoned && must_exit_now) *must_exit_now = true;
  if (!write_error.empty()) {
    err << "parity sweep: " << write_error << "\n";
    return SweepOutcome::could_not_run;
  }
  std::vector<nlohmann::ordered_json> cases;
  try {
    cases = read_folder_cases(o.out, matrix.digest, err);
  } catch (const std::exception& e) {
    err << "parity sweep: " << e.what() << "\n";
    return SweepOutcome::could_not_run;
  }
  // The whole sweep's: after --resume, the earlier invocations' too.
  const double seconds =
      sweep_seconds(cases, invocation, std::chrono::duration<double>(Clock::now() - start).count());
  std::optional<SweepBaselineResult> compared;
  if (baseline) compared = compare_cases_with_baseline(*baseline, cases);
  return finish_folder(o.out, matrix, cases, seconds, shard, o.junit, "parity sweep " + o.matrix,
                       out, err, compared ? &*compared : nullptr);
}

}  // namespace parity::sweep
