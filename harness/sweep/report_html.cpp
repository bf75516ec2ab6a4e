#include "harness/sweep/report_html.h"

#include <algorithm>
#include <map>

#include "harness/sweep/html_text.h"
#include "harness/sweep/report_plots.h"

namespace parity::sweep {

namespace {

using html::escape;
using html::string_at;

const char* kStyle = R"(body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 6px;font-size:.85em}
th{background:#f2f2f2;text-align:left}.case-cell{display:inline-block;min-width:3.2em;
text-align:center;padding:2px 4px;margin:1px;border-radius:3px;color:#fff;text-decoration:none;
font-weight:bold}.outcome-passed{background:#2e7d32;fill:#2e7d32}
.outcome-property_failed{background:#c62828;fill:#c62828}
.outcome-rank_failure{background:#6a1b9a;fill:#6a1b9a}
.outcome-bad_report{background:#e65100;fill:#e65100}.outcome-invalid{background:#9e9e9e;fill:#9e9e9e}
.outcome-unknown{background:#455a64;fill:#455a64}
svg{background:#fafafa;border:1px solid #ddd;display:block;margin:.3em 0}
.grid-line{stroke:#e0e0e0}.tick,.bar-label{font-size:10px;fill:#555;font-family:monospace}
.tolerance{stroke:#ef6c00;stroke-width:2;stroke-dasharray:5 3;fill:none}
.point.ok{fill:#1565c0}.point.fail{fill:#c62828}.point.exact{fill:#fff;stroke:#1565c0}
.failure{border-left:4px solid #c62828;padding:.2em 1em;margin:1em 0;background:#fff8f8}
pre{background:#f5f5f5;padding:.5em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}
.repro{background:#263238;color:#eceff1}figure{margin:1em 0}figcaption{font-size:.9em})";

// The outcome as a CSS class suffix and a short cell text.
std::string outcome_of(const nlohmann::json& c) {
  const std::string o = string_at(c, "outcome", "unknown");
  if (o == "passed" || o == "property_failed" || o == "rank_failure" || o == "bad_report") return o;
  return "unknown";
}
const char* cell_text(const std::string& outcome) {
  if (outcome == "passed") return "pass";
  if (outcome == "property_failed") return "FAIL";
  if (outcome == "rank_failure") return "rank";
  if (outcome == "bad_report") return "report";
  if (outcome == "invalid") return "invalid";
  return "?";
}

std::vector<std::string> axes_of(const SweepReportInput& in) {
  std::vector<std::string> axes;
  const auto it = in.summary.find("axes");
  if (it != in.summary.end() && it->is_array())
    for (const nlohmann::json& a : *it)
      if (a.is_string()) axes.push_back(a.get<std::string>());
  if (axes.empty() && !in.cases.empty() && in.cases.front().contains("assignment") &&
      in.cases.front()["assignment"].is_object())
    for (const auto& [k, v] : in.cases.front()["assignment"].items()) axes.push_back(k);
  return axes;
}

// One entry of the grid: a case that ran, or an invalid combination.
struct GridItem {
  nlohmann::json assignment;
  std::string id, outcome, title, link;
};

// Orders an axis's values as the matrix lists them, else by first appearance.
class ValueOrder {
 public:
  ValueOrder(const nlohmann::json& matrix, const std::vector<std::string>& axes) {
    for (const std::string& a : axes) {
      const nlohmann::json* list = nullptr;
      if (matrix.is_object() && matrix.contains(a) && matrix[a].is_array()) list = &matrix[a];
      if (list)
        for (const nlohmann::json& v : *list) rank(a, v.dump());
    }
  }
  int rank(const std::string& axis, const std::string& value) {
    auto& m = ranks_[axis];
    return m.try_emplace(value, static_cast<int>(m.size())).first->second;
  }

 private:
  std::map<std::string, std::map<std::string, int>> ranks_;
};

struct Header {
  std::vector<int> order;
  std::string text;  // "tp=2 dp=1"
  bool operator<(const Header& o) const { return order < o.order; }
};

Header header_of(const nlohmann::json& assignment, const std::vector<std::string>& axes,
                 ValueOrder& order) {
  Header h;
  for (const std::string& a : axes) {
    const nlohmann::json v =
        assignment.is_object() && assignment.contains(a) ? assignment[a] : nlohmann::json("-");
    h.order.push_back(order.rank(a, v.dump()));
    h.text += (h.text.empty() ? "" : " ") + a + "=" + html::value_text(v);
  }
  return h;
}

std::string render_grid(const SweepReportInput& in, const std::vector<GridItem>& items) {
  const std::vector<std::string> axes = axes_of(in);
  // Rows: the first half of the axes; columns: the rest.
  const std::size_t split = axes.size() / 2;
  const std::vector<std::string> row_axes(axes.begin(), axes.begin() + split);
  const std::vector<std::string> col_axes(axes.begin() + split, axes.end());
  ValueOrder order(html::at(in.summary, "matrix"), axes);
  std::map<Header, std::map<Header, std::vector<const GridItem*>>> cells;
  std::map<Header, int> columns;
  for (const GridItem& item : items) {
    const Header r = header_of(item.assignment, row_axes, order);
    const Header c = header_of(item.assignment, col_axes, order);
    cells[r][c].push_back(&item);
    columns[c] = 0;
  }
  std::string s = "<table class=\"grid\">\n<tr><th>" +
                  escape(row_axes.empty() ? std::string("(all)") : std::string("rows \\ columns")) +
                  "</th>";
  for (const auto& [c, unused] : columns)
    s += "<th class=\"column\">" + escape(c.text.empty() ? "(all)" : c.text) + "</th>";
  s += "</tr>\n";
  for (const auto& [r, row] : cells) {
    s += "<tr><th class=\"row\">" + escape(r.text.empty() ? "(all)" : r.text) + "</th>";
    for (const auto& [c, unused] : columns) {
      s += "<td>";
      const auto it = row.find(c);
      if (it != row.end())
        for (const GridItem* item : it->second) {
          const std::string tag = item->link.empty() ? "span" : "a";
          s += "<" + tag + " class=\"case-cell outcome-" + item->outcome + "\" data-case=\"" +
               escape(item->id) + "\" title=\"" + escape(item->title) + "\"" +
               (item->link.empty() ? "" : " href=\"#" + item->link + "\"") + ">" +
               cell_text(item->outcome) + "</" + tag + ">";
        }
      s += "</td>";
    }
    s += "</tr>\n";
  }
  s += "</table>\n<p class=\"legend\">";
  for (const char* o : {"passed", "property_failed", "rank_failure", "bad_report", "invalid"})
    s += "<span class=\"case-legend case-cell outcome-" + std::string(o) + "\">" + cell_text(o) +
         "</span> " + escape(o) + " ";
  s += "</p>\n";
  return s;
}

std::vector<std::string> reasons_of(const nlohmann::json& c) {
  std::vector<std::string> out;
  const nlohmann::json& report = html::at(c, "report");
  if (report.is_object()) {
    for (const nlohmann::json& p : html::array_at(report, "properties"))
      if (string_at(p, "status") == "FAIL")
        out.push_back(string_at(p, "name", "?") + ": " + string_at(p, "reason"));
    for (const nlohmann::json& line : html::array_at(report, "expectations"))
      if (line.is_string() && line.get<std::string>().find(": not met") != std::string::npos)
        out.push_back(line.get<std::string>());
    const nlohmann::json& baseline = html::at(report, "baseline");
    if (baseline.is_object())
      for (const nlohmann::json& d : html::array_at(baseline, "differences"))
        out.push_back("baseline: " + string_at(d, "what") + ": baseline " +
                      string_at(d, "baseline") + " now " + string_at(d, "current") + " (" +
                      string_at(d, "reason") + ")");
  }
  const std::string failure = string_at(c, "failure");
  if (!failure.empty()) out.push_back(failure);
  if (out.empty()) out.push_back("(no reason recorded)");
  return out;
}

std::string render_failure(const nlohmann::json& c, std::size_t number) {
  const std::string outcome = outcome_of(c);
  std::string s = "<article class=\"failure outcome-" + outcome + "-failure\" id=\"failure-" +
                  std::to_string(number) + "\" data-case=\"" + escape(string_at(c, "case")) +
                  "\">\n<h3>" + std::to_string(number) + ". " + escape(string_at(c, "case", "?")) +
                  "</h3>\n<p>outcome: <b>" + escape(outcome) + "</b></p>\n<ul class=\"reasons\">\n";
  for (const std::string& r : reasons_of(c)) s += "<li class=\"reason\">" + escape(r) + "</li>\n";
  s += "</ul>\n<p>reproduce:</p>\n<pre class=\"repro\">" +
       escape(string_at(c, "repro", "(no repro command recorded)")) + "</pre>\n";
  const nlohmann::json& report = html::at(c, "report");
  const nlohmann::json scenario = report.is_object() && report.contains("scenario")
                                      ? report["scenario"]
                                      : html::at(c, "assignment");
  s += "<p>scenario" +
       std::string(string_at(c, "failure_file").empty()
                       ? ""
                       : " (" + escape(string_at(c, "failure_file")) + ")") +
       ":</p>\n<pre class=\"scenario\">" + escape(scenario.dump(2)) + "</pre>\n</article>\n";
  return s;
}

std::string total(const nlohmann::json& summary, const char* key) {
  const auto it = summary.find(key);
  if (it == summary.end()) return "-";
  if (it->is_array()) return std::to_string(it->size());
  if (it->is_number_float())
    return html::number(it->get<double>());  // seconds: 0.518, not 17 digits
  return html::value_text(*it);
}

std::string render_header(const SweepReportInput& in) {
  std::string s =
      "<header id=\"summary\">\n<h1>" + escape(in.title) + "</h1>\n<table id=\"totals\"><tr>";
  const std::vector<std::pair<const char*, const char*>> cols = {{"total", "cases"},
                                                                 {"ran", "ran"},
                                                                 {"passed", "passed"},
                                                                 {"failed", "failed"},
                                                                 {"rank_failures", "rank failures"},
                                                                 {"invalid", "invalid"},
                                                                 {"excluded", "excluded"},
                                                                 {"seconds", "seconds"}};
  for (const auto& [key, name] : cols) s += "<th>" + escape(name) + "</th>";
  s += "</tr><tr>";
  for (const auto& [key, name] : cols)
    s += "<td class=\"total\" data-key=\"" + escape(key) + "\">" + escape(total(in.summary, key)) +
         "</td>";
  s += "</tr></table>\n<p class=\"about\">matrix digest " +
       escape(string_at(in.summary, "matrix_digest", "-"));
  if (!in.cases.empty()) {
    const nlohmann::json& first = in.cases.front();
    s += "; backend " + escape(string_at(first, "backend", "-")) + "; parity " +
         escape(string_at(first, "parity_version", "-")) + "; host " +
         escape(string_at(first, "host", "-"));
  }
  s += "</p>\n</header>\n";
  return s;
}

// summary.json's "baseline" (parity sweep --baseline): one line per difference.
std::string render_baseline(const nlohmann::json& summary) {
  const nlohmann::json& b = html::at(summary, "baseline");
  if (!b.is_object()) return "";
  const auto& differences = html::array_at(b, "differences");
  std::string s = "<section id=\"baseline\">\n<h2>Against the baseline " +
                  escape(string_at(b, "dir", "?")) + "</h2>\n<p>" +
                  std::to_string(differences.size()) + " difference(s) in " +
                  escape(total(b, "compared")) + " compared case(s); " +
                  escape(total(b, "not_in_baseline")) + " not in the baseline</p>\n";
  if (differences.empty()) return s + "</section>\n";
  s += "<ul>\n";
  for (const nlohmann::json& d : differences)
    s += "<li class=\"baseline-difference\"><code>" + escape(string_at(d, "case", "?")) +
         "</code>: " + escape(string_at(d, "what")) + ": baseline " +
         escape(string_at(d, "baseline")) + " now " + escape(string_at(d, "current")) + " (" +
         escape(string_at(d, "reason")) + ")</li>\n";
  return s + "</ul>\n</section>\n";
}

}  // namespace

std::string render_sweep_report(const SweepReportInput& in) {
  std::vector<GridItem> items;
  std::string failures;
  std::size_t failure_count = 0;
  for (std::size_t i = 0; i < in.cases.size(); ++i) {
    const nlohmann::json& c = in.cases[i];
    GridItem item;
    item.assignment = html::at(c, "assignment");
    item.id = string_at(c, "case", "?");
    item.outcome = outcome_of(c);
    item.title = "#" + std::to_string(i + 1) + " " + item.id + ": " + item.outcome;
    if (item.outcome != "passed") {
      ++failure_count;
      item.link = "failure-" + std::to_string(i + 1);
      failures += render_failure(c, i + 1);
    }
    items.push_back(std::move(item));
  }
  std::string invalid;
  for (const nlohmann::json& v : html::array_at(in.summary, "invalid")) {
    GridItem item;
    item.assignment = html::at(v, "assignment");
    item.id = string_at(v, "case", "?");
    item.outcome = "invalid";
    item.title = item.id + ": invalid: " + string_at(v, "reason");
    items.push_back(item);
    invalid += "<li class=\"invalid-case\"><code>" + escape(item.id) +
               "</code>: " + escape(string_at(v, "reason")) + "</li>\n";
  }

  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  escape(in.title) + "</title>\n<style>\n" + kStyle +
                  "\n</style>\n</head>\n<body>\n";
  s += render_header(in);
  s += "<section id=\"grid\">\n<h2>Pass/fail by configuration</h2>\n" + render_grid(in, items) +
       "</section>\n";
  s += "<section id=\"metrics\">\n<h2>Metric errors per case</h2>\n" +
       render_metric_plots(in.cases) + "</section>\n";
  s += "<section id=\"times\">\n<h2>Time per case</h2>\n" + render_time_chart(in.cases) +
       "</section>\n";
  s += "<section id=\"failures\">\n<h2>Failures (" + std::to_string(failure_count) + ")</h2>\n" +
       (failures.empty() ? "<p class=\"empty\">No case failed.</p>\n" : failures) + "</section>\n";
  s += render_baseline(in.summary);
  s += "<section id=\"invalid\">\n<h2>Invalid combinations</h2>\n" +
       (invalid.empty() ? "<p class=\"empty\">None.</p>\n" : "<ul>\n" + invalid + "</ul>\n") +
       "</section>\n</body>\n</html>\n";
  return s;
}

}  // namespace parity::sweep
