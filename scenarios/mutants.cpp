#include "scenarios/mutants.h"

#include <chrono>
#include <cstdio>
#include <ostream>

#include <rapidcheck.h>

#include "harness/checks/check.h"
#include "harness/parallel/code_path_faults.h"
#include "scenarios/generators.h"

namespace parity::scenarios {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Row {
  std::string fault, expected;  // expected: the table's caught_by
  bool caught = false;
  std::vector<std::string> by;  // properties FAILED on the shrunk scenario
  std::string reason;
  RunConfig shrunk;
  int cases = 0, rank_failures = 0;
  double seconds_to_catch = 0, seconds = 0;
};

Row hunt(const CodePathFaultInfo& fault, const cli::MutantsOptions& o) {
  Row row;
  row.fault = std::string(fault.name);
  row.expected = std::string(fault.caught_by);
  const auto start = Clock::now();
  bool failed_once = false;
  Clock::time_point first_failure;
  rc::detail::TestParams params;
  params.seed = o.seed;
  params.maxSuccess = o.cases;
  rc::detail::TestMetadata metadata;
  metadata.id = "mutants/" + row.fault;
  metadata.description = row.fault;
  const auto result = rc::detail::checkProperty(
      rc::detail::toProperty([&] {
        RunConfig scenario = *gen_scenario();
        // Shrinking is bounded: past the deadline a candidate counts as not
        // failing, so the last failing one stays the counterexample.
        if (failed_once && since(first_failure) > o.shrink_seconds) return;
        scenario.inject = {row.fault};
        ++row.cases;
        const checks::CheckOutcome outcome = checks::execute_check(scenario, "mutants");
        if (outcome.exit_code == 3) {
          ++row.rank_failures;  // not a property's catch
          return;
        }
        std::vector<std::string> by;
        std::string reason;
        for (const checks::PropertyResult& p : outcome.report.properties)
          if (p.status == checks::Status::fail) {
            by.push_back(p.name);
            if (reason.empty()) reason = p.name + ": " + p.reason;
          }
        if (by.empty()) return;
        if (!failed_once) {
          failed_once = true;
          first_failure = Clock::now();
          row.seconds_to_catch = since(start);
        }
        row.by = by;
        row.reason = reason;
        row.shrunk = scenario;
        RC_FAIL(reason);
      }),
      metadata, params);
  row.caught = result.template is<rc::detail::FailureResult>();
  row.seconds = since(start);
  return row;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

nlohmann::json compact(const RunConfig& c) {
  nlohmann::json j = differing_fields(c);
  j.erase("inject");
  return j;
}

}  // namespace

int run_mutants(const cli::MutantsOptions& o, std::ostream& out, std::ostream& err) {
  std::vector<const CodePathFaultInfo*> faults;
  for (const CodePathFaultInfo& f : code_path_faults()) {
    bool wanted = o.faults.empty();
    for (const std::string& name : o.faults) wanted = wanted || name == f.name;
    if (wanted) faults.push_back(&f);
  }
  out << "parity mutants: " << faults.size() << " fault(s), up to " << o.cases
      << " generated scenario(s) each, seed " << o.seed << ", shrinking up to "
      << secs(o.shrink_seconds) << " s" << std::endl;
  std::vector<Row> rows;
  for (const CodePathFaultInfo* f : faults) {
    rows.push_back(hunt(*f, o));
    const Row& r = rows.back();
    out << "  " << r.fault << ": " << (r.caught ? "caught" : "NOT caught") << " after "
        << r.cases << " check(s), " << secs(r.seconds) << " s" << std::endl;
  }
  out << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-30s %-8s %-36s %-8s %s\n", "fault", "caught", "by",
                "seconds", "shrunk scenario");
  out << line;
  int missed = 0;
  nlohmann::json report = nlohmann::json::array();
  for (const Row& r : rows) {
    std::string by;
    for (const std::string& p : r.by) by += (by.empty() ? "" : ",") + p;
    std::snprintf(line, sizeof line, "%-30s %-8s %-36s %-8s ", r.fault.c_str(),
                  r.caught ? "yes" : "NO", r.caught ? by.c_str() : "-",
                  secs(r.caught ? r.seconds_to_catch : r.seconds).c_str());
    out << line << (r.caught ? compact(r.shrunk).dump() : "-") << "\n";
    if (!r.caught) ++missed;
    nlohmann::json j = {{"fault", r.fault},      {"expected_by", r.expected},
                        {"caught", r.caught},     {"by", r.by},
                        {"reason", r.reason},     {"cases", r.cases},
                        {"rank_failures", r.rank_failures},
                        {"seconds_to_catch", r.seconds_to_catch},
                        {"seconds", r.seconds}};
    j["shrunk"] = r.caught ? compact(r.shrunk) : nlohmann::json(nullptr);
    report.push_back(j);
  }
  out << "\nmutants " << (missed ? "FAILED" : "passed") << ": " << rows.size() - missed << " of "
      << rows.size() << " fault(s) caught" << std::endl;
  int code = missed ? cli::kExitPropertyFailed : cli::kExitOk;
  if (!o.report.empty()) {
    try {
      cli::write_file_atomically(o.report, nlohmann::json{{"mutants", report}}.dump(2) + "\n");
    } catch (const std::exception& e) {
      err << "parity mutants: --report " << o.report << ": " << e.what() << "\n";
      if (code == cli::kExitOk) code = cli::kExitBadInput;
    }
  }
  for (const Row& r : rows)
    if (!r.caught)
      err << "parity mutants: " << r.fault << " NOT caught in " << r.cases
          << " generated scenario(s) (expected: " << r.expected << ")\n";
  return code;
}

}  // namespace parity::scenarios
