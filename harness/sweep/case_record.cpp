#include "harness/sweep/case_record.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

#include "harness/checks/scenario.h"
#include "harness/sweep/results.h"

#ifndef PARITY_VERSION
#define PARITY_VERSION "unknown"
#endif

namespace parity::sweep {

std::string outcome_name(checks::CheckVerdict verdict) {
  switch (verdict) {
    case checks::CheckVerdict::passed:
      return "passed";
    case checks::CheckVerdict::property_failed:
      return "property_failed";
    case checks::CheckVerdict::rank_failure:
      return "rank_failure";
    case checks::CheckVerdict::bad_report:
      return "bad_report";
  }
  return "rank_failure";
}

std::string parity_version() { return PARITY_VERSION; }

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string failure_file_name(const SweepCase& c) {
  char index[16];
  std::snprintf(index, sizeof index, "%04d", c.index);
  std::string name = std::string("failures/") + index + "-";
  for (char ch : c.id) {
    const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                       (ch >= '0' && ch <= '9') || ch == '=' || ch == '.' || ch == '-';
    name += ch == ' ' ? '_' : plain ? ch : '-';
  }
  return name + ".json";
}

nlohmann::ordered_json cause_json(const checks::RankFailureCause& cause) {
  nlohmann::ordered_json j;
  j["run"] = cause.run;
  j["run_title"] = cause.title;
  j["kind"] = checks::kind_name(cause);
  const std::optional<RankFailure>& f = cause.culprit;
  j["rank"] = f ? nlohmann::ordered_json(f->rank) : nlohmann::ordered_json();
  j["coordinates"] =
      f ? nlohmann::ordered_json(
              {{"tp", f->coordinates.tp}, {"cp", f->coordinates.cp}, {"dp", f->coordinates.dp}})
        : nlohmann::ordered_json();
  j["victim"] = f && f->victim;
  j["in_collective"] = f && f->in_collective;
  j["detail"] = f ? f->detail : cause.line;
  j["last_collective"] = f ? f->last_collective : "";
  j["headline"] = cause.headline;
  j["line"] = cause.line;
  return j;
}

std::string invocation_id() {
  const long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  static std::atomic<int> made{0};  // two in one process within a millisecond differ too
  return host_name() + ":" + std::to_string(::getpid()) + ":" + std::to_string(ms) + ":" +
         std::to_string(made++);
}

nlohmann::ordered_json case_record(const Matrix& matrix, const SweepCase& c,
                                   const checks::CheckOutcome& outcome, double seconds,
                                   const std::string& dir, const std::string& failure_file,
                                   const RecordedBy& by) {
  nlohmann::ordered_json r;
  r["schema"] = kCaseSchema;
  r["version"] = kCaseSchemaVersion;
  r["matrix_digest"] = matrix.digest;
  r["case"] = c.id;
  r["index"] = c.index;
  r["assignment"] = c.assignment;
  r["outcome"] = outcome_name(outcome.verdict);
  r["seconds"] = seconds;
  r["host"] = host_name();
  r["backend"] = c.config.backend;
  r["parity_version"] = parity_version();
  r["failure"] = outcome.failure;
  r["cause"] = outcome.cause ? cause_json(*outcome.cause) : nlohmann::ordered_json();
  r["failure_file"] =
      failure_file.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(failure_file);
  r["repro"] = failure_file.empty()
                   ? nlohmann::ordered_json()
                   : nlohmann::ordered_json("parity repro " + dir + "/" + failure_file);
  r["report"] = checks::report_json(outcome.report);
  r["invocation"] = by.invocation;
  r["invocation_seconds"] = by.invocation_seconds;
  return r;
}

nlohmann::json failure_scenario(const Matrix& matrix, const std::string& matrix_path,
                                const SweepCase& c, const RunConfig& scenario,
                                const checks::CheckOutcome& outcome,
                                const std::string& shrunk_note) {
  checks::ScenarioMeta meta;
  nlohmann::json about = {{"sweep", matrix_path},
                          {"matrix_digest", matrix.digest},
                          {"case", c.id},
                          {"outcome", outcome_name(outcome.verdict)}};
  for (const checks::PropertyResult& p : outcome.report.properties) {
    meta.expect[p.name] = p.status == checks::Status::skip ? "SKIP" : "PASS";
    if (p.status == checks::Status::fail && !about.contains("property")) {
      about["property"] = p.name;
      about["reason"] = p.reason;
    }
  }
  if (outcome.verdict == checks::CheckVerdict::rank_failure) {
    about["failure"] = outcome.failure;
    if (outcome.cause) about["cause"] = cause_json(*outcome.cause);
  }
  if (!shrunk_note.empty()) about["shrunk"] = shrunk_note;
  meta.about = about;
  RunConfig saved = scenario;
  saved.report.clear();
  return checks::scenario_file_json(saved, meta);
}

}  // namespace parity::sweep
