#include "harness/sweep/summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "harness/backend/version.h"
#include "harness/config/run_config_fields.h"
#include "harness/sweep/html_text.h"

namespace parity::sweep {
namespace {

using ojson = nlohmann::ordered_json;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string text_of(const ojson& v) {
  return v.is_null() ? "" : field_value_text(nlohmann::json::parse(v.dump()));
}

bool is_failure(const std::string& outcome) {
  return outcome == "property_failed" || outcome == "bad_report";
}

}  // namespace

std::vector<ojson> unique_cases(const std::vector<ojson>& records) {
  std::vector<ojson> out;
  std::set<std::string> seen;
  for (const ojson& r : records)
    if (seen.insert(r.value("case", "")).second) out.push_back(r);
  std::stable_sort(out.begin(), out.end(), [](const ojson& a, const ojson& b) {
    return a.value("index", 0) < b.value("index", 0);
  });
  return out;
}

ojson summary_json(const Matrix& matrix, const std::vector<ojson>& cases, double seconds,
                   const std::string& shard) {
  int passed = 0, failed = 0, rank_failures = 0;
  for (const ojson& c : cases) {
    const std::string outcome = c.value("outcome", "");
    if (outcome == "passed")
      ++passed;
    else if (outcome == "rank_failure")
      ++rank_failures;
    else
      ++failed;
  }
  ojson s;
  s["schema"] = kSummarySchema;
  s["version"] = kSummarySchemaVersion;
  s["build"] = version_json();
  s["matrix_digest"] = matrix.digest;
  s["matrix"] = matrix.source;
  s["axes"] = matrix.axes;
  s["shard"] = shard.empty() ? ojson() : ojson(shard);
  s["total"] = matrix.cases.size();
  s["ran"] = cases.size();
  s["not_run"] = static_cast<int>(matrix.cases.size()) - static_cast<int>(cases.size());
  s["passed"] = passed;
  s["failed"] = failed;
  s["rank_failures"] = rank_failures;
  ojson invalid = ojson::array();
  for (const InvalidCase& i : matrix.invalid)
    invalid.push_back({{"case", i.id}, {"assignment", i.assignment}, {"reason", i.reason}});
  s["invalid"] = invalid;
  s["excluded"] = matrix.excluded;
  s["seconds"] = seconds;
  std::vector<const ojson*> by_time;
  by_time.reserve(cases.size());
  for (const ojson& c : cases) by_time.push_back(&c);
  std::stable_sort(by_time.begin(), by_time.end(), [](const ojson* a, const ojson* b) {
    return a->value("seconds", 0.0) > b->value("seconds", 0.0);
  });
  ojson slowest = ojson::array();
  for (std::size_t i = 0; i < by_time.size() && i < 5; ++i)
    slowest.push_back(
        {{"case", by_time[i]->value("case", "")}, {"seconds", by_time[i]->value("seconds", 0.0)}});
  s["slowest"] = slowest;
  return s;
}

std::string worst_property(const ojson& record) {
  const ojson& report = record.contains("report") ? record.at("report") : ojson();
  if (!report.is_object() || !report.contains("properties")) return "-";
  std::string worst = "-";
  double worst_rel = -1;
  for (const ojson& p : report.at("properties")) {
    if (p.value("status", "") == "FAIL") return p.value("name", "") + " FAIL";
    if (p.contains("max_rel") && p.at("max_rel").is_number() &&
        p.at("max_rel").get<double>() > worst_rel) {
      worst_rel = p.at("max_rel").get<double>();
      worst = p.value("name", "") + " rel " + fmt("%.3g", worst_rel);
    }
  }
  return worst;
}

std::string cause_line(const ojson& record) {
  const ojson& cause = record.contains("cause") ? record.at("cause") : ojson();
  if (cause.is_object()) {
    const std::string title = cause.value("run_title", "");
    return "run (" + cause.value("run", "") + ")" + (title.empty() ? "" : " " + title) + ": " +
           cause.value("line", "");
  }
  // Older records: the failure text's first rank line, else its first line.
  const std::string failure = record.value("failure", "");
  std::string first;
  for (std::size_t start = 0; start < failure.size();) {
    std::size_t end = failure.find('\n', start);
    if (end == std::string::npos) end = failure.size();
    std::string line = failure.substr(start, end - start);
    line.erase(0, line.find_first_not_of(' '));
    if (line.rfind("rank ", 0) == 0) return line;
    if (first.empty()) first = line;
    start = end + 1;
  }
  return first;
}

double sweep_seconds(const std::vector<ojson>& records, const std::string& current,
                     double current_seconds) {
  std::map<std::string, double> last;  // invocation -> its last recorded case's seconds
  for (const ojson& r : records) {
    const std::string id = r.contains("invocation") && r.at("invocation").is_string()
                               ? r.at("invocation").get<std::string>()
                               : std::string();
    if (id.empty() || id == current) continue;
    double& s = last[id];
    s = std::max(s, r.value("invocation_seconds", 0.0));
  }
  double total = current_seconds;
  for (const auto& [id, seconds] : last) total += seconds;
  return total;
}

std::string results_csv(const Matrix& matrix, const std::vector<ojson>& cases) {
  std::string out = "case,index";
  for (const std::string& a : matrix.axes) out += "," + csv_field(a);
  out += ",outcome,seconds,worst_property,cause\n";
  for (const ojson& c : cases) {
    out += csv_field(c.value("case", "")) + "," + std::to_string(c.value("index", 0));
    const ojson& assignment = c.contains("assignment") ? c.at("assignment") : ojson();
    for (const std::string& a : matrix.axes)
      out += "," + csv_field(assignment.contains(a) ? text_of(assignment.at(a)) : "");
    out += "," + c.value("outcome", "") + "," + fmt("%.3f", c.value("seconds", 0.0)) + "," +
           csv_field(worst_property(c)) + "," + csv_field(cause_line(c)) + "\n";
  }
  return out;
}

std::string summary_table(const ojson& s, const std::vector<ojson>& cases) {
  std::string out;
  auto row = [&](const std::string& what, const std::string& value) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-22s %s\n", what.c_str(), value.c_str());
    out += line;
  };
  out += "sweep summary (matrix " + s.value("matrix_digest", "") + ")\n";
  row("cases", std::to_string(s.value("total", 0)) + " (" + std::to_string(s.value("ran", 0)) +
                   " ran, " + std::to_string(s.value("not_run", 0)) + " not run)");
  row("passed", std::to_string(s.value("passed", 0)));
  row("failed", std::to_string(s.value("failed", 0)));
  row("rank failures", std::to_string(s.value("rank_failures", 0)));
  row("excluded", std::to_string(s.value("excluded", 0)));
  row("invalid (skipped)", std::to_string(s.at("invalid").size()));
  row("seconds", fmt("%.1f", s.value("seconds", 0.0)));
  for (const ojson& slow : s.at("slowest"))
    row("slowest", fmt("%.2f s  ", slow.value("seconds", 0.0)) + slow.value("case", ""));
  // The invalid cases' reasons, each distinct reason once (a matrix crossing
  // sp with tp = 1 makes many cases of one rule).
  std::map<std::string, std::vector<std::string>> reasons;  // reason -> its cases
  for (const ojson& i : s.at("invalid"))
    reasons[i.value("reason", "")].push_back(i.value("case", ""));
  const std::size_t kCasesShown = 3;
  for (const auto& [reason, ids] : reasons) {
    row("invalid x" + std::to_string(ids.size()), reason);
    std::string shown;
    for (std::size_t k = 0; k < ids.size() && k < kCasesShown; ++k)
      shown += (k ? "; " : "") + ids[k];
    if (ids.size() > kCasesShown)
      shown +=
          "; and " + std::to_string(ids.size() - kCasesShown) + " more (summary.json \"invalid\")";
    row("", "cases: " + shown);
  }
  for (const ojson& c : cases) {
    const std::string outcome = c.value("outcome", "");
    if (outcome == "passed") continue;
    const std::string why = outcome == "rank_failure" ? cause_line(c) : worst_property(c);
    out += "  FAILED " + c.value("case", "") + ": " + outcome + " (" + (why.empty() ? "-" : why) +
           ")\n";
    if (c.contains("repro") && c.at("repro").is_string())
      out += "    " + c.at("repro").get<std::string>() + "\n";
  }
  return out;
}

std::string xml_escape(const std::string& text) {
  // XML 1.0 has no character for most control bytes, even escaped: they become '?'.
  std::string printable = text;
  for (char& c : printable)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') c = '?';
  return html::escape(printable);  // & < > " ' as entities, as XML wants them
}

std::string junit_xml(const std::string& suite, const ojson& s, const std::vector<ojson>& cases) {
  int failures = 0, errors = 0;
  for (const ojson& c : cases) {
    const std::string outcome = c.value("outcome", "");
    if (is_failure(outcome))
      ++failures;
    else if (outcome != "passed")
      ++errors;
  }
  const std::string counts = " tests=\"" + std::to_string(cases.size()) + "\" failures=\"" +
                             std::to_string(failures) + "\" errors=\"" + std::to_string(errors) +
                             "\" time=\"" + fmt("%.3f", s.value("seconds", 0.0)) + "\"";
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites name=\"" + xml_escape(suite) + "\"" + counts + ">\n";
  out += "  <testsuite name=\"" + xml_escape(suite) + "\"" + counts + " skipped=\"0\">\n";
  out += "    <properties>\n      <property name=\"matrix_digest\" value=\"" +
         xml_escape(s.value("matrix_digest", "")) + "\"/>\n    </properties>\n";
  for (const ojson& c : cases) {
    const std::string repro = c.contains("repro") && c.at("repro").is_string()
                                  ? c.at("repro").get<std::string>()
                                  : std::string();
    out += "    <testcase classname=\"parity.sweep\" name=\"" + xml_escape(c.value("case", "")) +
           "\" time=\"" + fmt("%.3f", c.value("seconds", 0.0)) + "\"";
    const std::string outcome = c.value("outcome", "");
    if (outcome == "passed") {
      out += "/>\n";
      continue;
    }
    out += ">\n";
    if (outcome == "rank_failure") {
      const std::string failure = c.value("failure", "");
      out += "      <error message=\"" + xml_escape(cause_line(c)) + "\" type=\"rank_failure\">" +
             xml_escape(failure + repro) + "</error>\n";
    }
    const ojson& report = c.contains("report") ? c.at("report") : ojson();
    if (report.is_object() && report.contains("properties"))
      for (const ojson& p : report.at("properties")) {
        if (p.value("status", "") != "FAIL") continue;
        const std::string reason = p.value("reason", "");
        out += "      <failure message=\"" + xml_escape(p.value("name", "") + ": " + reason) +
               "\" type=\"" + xml_escape(p.value("name", "")) + "\">" +
               xml_escape(reason + "\n" + repro) + "</failure>\n";
      }
    out += "    </testcase>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace parity::sweep
