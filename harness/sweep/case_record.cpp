#include "harness/sweep/case_record.h"

#include <unistd.h>

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

nlohmann::ordered_json case_record(const Matrix& matrix, const SweepCase& c,
                                   const checks::CheckOutcome& outcome, double seconds,
                                   const std::string& dir, const std::string& failure_file) {
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
  r["failure_file"] =
      failure_file.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(failure_file);
  r["repro"] = failure_file.empty()
                   ? nlohmann::ordered_json()
                   : nlohmann::ordered_json("parity repro " + dir + "/" + failure_file);
  r["report"] = checks::report_json(outcome.report);
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
  if (outcome.verdict == checks::CheckVerdict::rank_failure) about["failure"] = outcome.failure;
  if (!shrunk_note.empty()) about["shrunk"] = shrunk_note;
  meta.about = about;
  RunConfig saved = scenario;
  saved.report.clear();
  return checks::scenario_file_json(saved, meta);
}

}  // namespace parity::sweep
