#include "harness/sweep/run_sweep.h"

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
#include "harness/sweep/progress.h"
#include "harness/sweep/results.h"
#include "harness/sweep/shrink.h"

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
  ctx.results.append(case_record(ctx.matrix, c, outcome, seconds, ctx.options.out, failure_file));
  ctx.progress.finished(c.id, outcome_name(outcome.verdict), seconds);
  return outcome.must_exit_now;
}

}  // namespace

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
  try {
    files::create_directories(o.out);
    if (!files::exists(matrix_copy_path(o.out)))
      files::write_atomically(matrix_copy_path(o.out), matrix.source.dump(2) + "\n");
    ResultsFile results(results_path(o.out));
    Progress progress(out, static_cast<int>(todo.size()), o.terminal);
    const CaseContext ctx{matrix, o, launch, results, progress};
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
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::optional<SweepBaselineResult> compared;
  if (baseline) compared = compare_cases_with_baseline(*baseline, cases);
  return finish_folder(o.out, matrix, cases, seconds, shard, o.junit, "parity sweep " + o.matrix,
                       out, err, compared ? &*compared : nullptr);
}

}  // namespace parity::sweep
