#include "harness/sweep/report_html.h"

#include <algorithm>

#include "harness/base/files.h"
#include "harness/config/run_config.h"
#include "harness/sweep/html_text.h"
#include "harness/sweep/report_grid.h"
#include "harness/sweep/report_plots.h"

namespace parity::sweep {

namespace {

using html::escape;
using html::string_at;

const char* kStyle = R"(body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1em;margin:.4em 0}
table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 6px;font-size:.85em}
th{background:#f2f2f2;text-align:left}.case-cell{display:inline-block;min-width:3.2em;
text-align:center;padding:2px 4px;margin:1px;border-radius:3px;color:#fff;text-decoration:none;
font-weight:bold;box-sizing:border-box}.outcome-passed{background:#2e7d32;fill:#2e7d32}
.outcome-property_failed{background:#c62828;fill:#c62828}
.outcome-rank_failure{background:#6a1b9a;fill:#6a1b9a}
.outcome-bad_report{background:#e65100;fill:#e65100}.outcome-invalid{background:#9e9e9e;fill:#9e9e9e}
.outcome-excluded{background:#fff;color:#757575;border:1px dashed #9e9e9e}
.outcome-not_run{background:#eceff1;color:#455a64;border:1px solid #b0bec5}
.outcome-unknown{background:#455a64;fill:#455a64}
.verdict{font-size:1.2em;font-weight:bold;padding:.5em .8em;border-radius:4px;color:#fff}
.verdict-passed{background:#2e7d32}.verdict-failed{background:#c62828}
.verdict-nothing_ran{background:#e65100}
nav{margin:.5em 0;font-size:.9em}nav a{margin-right:1em}
.grid-parts table{margin:.6em 0}caption{text-align:left;font-size:.85em;color:#555}
th.column{overflow-wrap:anywhere;vertical-align:bottom}th.row{white-space:nowrap}
.legend-entry{margin-right:1.2em;font-size:.9em;white-space:nowrap}
.plots{display:flex;flex-wrap:wrap;gap:0 1.5em}
svg{background:#fafafa;border:1px solid #ddd;display:block;margin:.3em 0}
.grid-line{stroke:#e0e0e0}.tick,.bar-label{font-size:10px;fill:#555;font-family:monospace}
.axis-label{font-size:11px;fill:#333;font-family:sans-serif}
.tolerance{stroke:#ef6c00;stroke-width:2;stroke-dasharray:5 3;fill:none}
.point.ok{fill:#1565c0}.point.fail{fill:#c62828}.point.exact{fill:#fff;stroke:#1565c0}
.failure{border-left:4px solid #c62828;padding:.2em 1em;margin:1em 0;background:#fff8f8}
.failure.outcome-rank_failure-failure{border-left-color:#6a1b9a;background:#faf5fc}
.facts th{width:11em;vertical-align:top}.facts td{max-width:75em}
.scenario-diff{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:.1em 1.2em}
.scenario-diff .default{color:#757575}.outcome{font-weight:normal;color:#555}
.scenario-source,.shrunk-failure{margin:.2em 0}
pre{background:#f5f5f5;padding:.5em;overflow-x:auto;font-size:.8em;white-space:pre-wrap;margin:.2em 0}
.reason{white-space:pre-wrap}
.repro{background:#263238;color:#eceff1}.facts pre{font-size:1em}
figure.metric-plot{width:min-content}figure{margin:1em 0}figcaption{font-size:.9em})";

// The outcome as a CSS class suffix.
std::string outcome_of(const nlohmann::json& c) {
  std::string o = string_at(c, "outcome", "unknown");
  if (o == "passed" || o == "property_failed" || o == "rank_failure" || o == "bad_report") return o;
  return "unknown";
}

std::string outcome_words(const std::string& outcome) {
  if (outcome == "property_failed") return "property failed";
  if (outcome == "rank_failure") return "rank failure";
  if (outcome == "bad_report") return "bad report";
  return outcome;
}

std::string plural(std::size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "4 property failures", "1 rank failure": what the verdict counts.
std::string outcome_count(const std::string& outcome, std::size_t n) {
  if (outcome == "property_failed") return plural(n, "property failure", "property failures");
  if (outcome == "rank_failure") return plural(n, "rank failure", "rank failures");
  if (outcome == "bad_report") return plural(n, "bad report", "bad reports");
  return plural(n, "unknown outcome", "unknown outcomes");
}

// The case's number as the failure files give it (its index in the matrix's
// expansion), else its position in results.jsonl.
long long index_of(const nlohmann::json& c, std::size_t position) {
  const nlohmann::json& v = html::at(c, "index");
  return v.is_number_integer() ? v.get<long long>() : static_cast<long long>(position);
}

std::string total(const nlohmann::json& summary, const char* key) {
  const auto it = summary.is_object() ? summary.find(key) : summary.end();
  if (!summary.is_object() || it == summary.end()) return "-";
  if (it->is_array()) return std::to_string(it->size());
  if (it->is_number_float())
    return html::number(it->get<double>());  // seconds: 0.518, not 17 digits
  return html::value_text(*it);
}

std::size_t count_at(const nlohmann::json& summary, const char* key) {
  const nlohmann::json& v = html::at(summary, key);
  if (v.is_array()) return v.size();
  return v.is_number_integer() && v.get<long long>() > 0 ? v.get<std::size_t>() : 0;
}

// One line a person reads first: did the sweep pass, and if not, how.
std::string render_verdict(const SweepReportInput& in) {
  std::map<std::string, std::size_t> by_outcome;
  for (const nlohmann::json& c : in.cases) ++by_outcome[outcome_of(c)];
  const std::size_t ran = in.cases.size();
  const std::size_t failing = ran - by_outcome["passed"];
  const std::size_t differences =
      html::array_at(html::at(in.summary, "baseline"), "differences").size();
  std::string kind, text;
  if (ran == 0) {
    kind = "nothing_ran";
    text = "NO CASE RAN";
  } else if (failing > 0 || differences > 0) {
    kind = "failed";
    text = "FAILED: " + std::to_string(failing) + " of " + plural(ran, "case", "cases") + " failed";
    std::string how;
    for (const char* o : {"property_failed", "rank_failure", "bad_report", "unknown"})
      if (by_outcome[o] > 0) how += (how.empty() ? "" : ", ") + outcome_count(o, by_outcome[o]);
    if (!how.empty()) text += " (" + how + ")";
    if (differences > 0)
      text += "; " + plural(differences, "difference", "differences") + " from the baseline";
  } else {
    kind = "passed";
    text =
        "PASSED: " + std::string(ran == 1 ? "the case" : "all " + std::to_string(ran) + " cases") +
        " passed";
  }
  std::string unrun;
  for (const auto& [key, words] : std::vector<std::pair<const char*, const char*>>{
           {"invalid", "invalid"}, {"excluded", "excluded"}, {"not_run", "not run"}})
    if (count_at(in.summary, key) > 0)
      unrun +=
          (unrun.empty() ? "" : ", ") + std::to_string(count_at(in.summary, key)) + " " + words;
  if (!unrun.empty()) text += "; did not run: " + unrun;
  return "<p id=\"verdict\" class=\"verdict verdict-" + kind + "\" data-verdict=\"" + kind + "\">" +
         escape(text) + "</p>\n";
}

std::string render_header(const SweepReportInput& in) {
  std::string s = "<header id=\"summary\">\n<h1>" + escape(in.title) + "</h1>\n" +
                  render_verdict(in) +
                  "<nav><a href=\"#failures\">failures</a><a href=\"#grid\">grid</a>"
                  "<a href=\"#metrics\">metric plots</a><a href=\"#times\">time per case</a>"
                  "<a href=\"#invalid\">invalid combinations</a></nav>\n<table id=\"totals\"><tr>";
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

// Every reason the case did not pass: its FAILed properties ("name: reason"),
// unmet expectations, baseline differences, and the rank failure's text.
std::vector<std::string> reasons_of(const nlohmann::json& c) {
  std::vector<std::string> out;
  const nlohmann::json& report = html::at(c, "report");
  for (const nlohmann::json& p : html::array_at(report, "properties"))
    if (string_at(p, "status") == "FAIL")
      out.push_back(string_at(p, "name", "?") + ": " + string_at(p, "reason"));
  for (const nlohmann::json& line : html::array_at(report, "expectations"))
    if (line.is_string() && line.get<std::string>().find(": not met") != std::string::npos)
      out.push_back(line.get<std::string>());
  for (const nlohmann::json& d : html::array_at(html::at(report, "baseline"), "differences"))
    out.push_back("baseline: " + string_at(d, "what") + ": baseline " + string_at(d, "baseline") +
                  " now " + string_at(d, "current") + " (" + string_at(d, "reason") + ")");
  return out;
}

const nlohmann::json* first_failed_property(const nlohmann::json& c) {
  for (const nlohmann::json& p : html::array_at(html::at(c, "report"), "properties"))
    if (string_at(p, "status") == "FAIL") return &p;
  return nullptr;
}

// The rank failure's cause, one line, read from its text (records written
// before the typed "cause"): the first rank line that is not a victim's ("rank 1 (tp=0,
// cp=0, dp=1) threw: ..."), else the "run failed: ..." headline, else the
// last line.
std::string rank_failure_cause(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    line.erase(0, line.find_first_not_of(" \t"));
    if (!line.empty()) lines.push_back(line);
    begin = end + 1;
  }
  for (const std::string& l : lines)
    if (l.rfind("rank ", 0) == 0 && l.find(") victim") == std::string::npos) return l;
  for (const std::string& l : lines)
    if (l.rfind("run failed:", 0) == 0) return l;
  return lines.empty() ? "" : lines.back();
}

// The scenario a failure shows: the saved failure file's (shrunk with
// --shrink), else the one in the case's report, else the case's axes.
struct ShownScenario {
  nlohmann::json options;
  std::string label;  // what it is and where it came from
  std::string still;  // a shrunk scenario's own first failure ("property: reason")
};

ShownScenario scenario_of(const SweepReportInput& in, const nlohmann::json& c) {
  const std::string file = string_at(c, "failure_file");
  const auto it = in.failure_files.find(file);
  if (!file.empty() && it != in.failure_files.end() && it->second.is_object()) {
    ShownScenario shown{it->second, "", ""};
    const nlohmann::json& about = html::at(it->second, "about");
    const std::string shrunk = string_at(about, "shrunk");
    if (!shrunk.empty() && !string_at(about, "property").empty())
      shown.still = string_at(about, "property") + ": " + string_at(about, "reason");
    shown.options.erase("about");
    shown.options.erase("expect");
    if (!shrunk.empty())
      shown.label = "shrunk scenario (" + file + "; " + shrunk + ")";
    else if (outcome_of(c) == "rank_failure")
      shown.label = "scenario as it ran (" + file + "; --shrink shrinks property failures only)";
    else
      shown.label = "scenario as it ran (" + file +
                    "; parity sweep --shrink saves the smallest scenario that still fails)";
    return shown;
  }
  const nlohmann::json& report = html::at(c, "report");
  const std::string missing = file.empty() ? "no failure file" : file + " was not read";
  if (html::at(report, "scenario").is_object())
    return {html::at(report, "scenario"), "scenario of the case's report (" + missing + ")", ""};
  return {html::at(c, "assignment"), "the case's matrix values (" + missing + ", no report)", ""};
}

// The fields of `options` whose values differ from RunConfig's defaults, in
// flag order (then keys RunConfig does not know), as a table.
std::string scenario_diff(const nlohmann::json& options) {
  static const nlohmann::json defaults = to_json(RunConfig{});
  if (!options.is_object()) return "<p class=\"empty\">(no scenario recorded)</p>\n";
  std::vector<std::string> keys = run_config_keys();
  for (const auto& [k, v] : options.items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  std::string items;
  for (const std::string& k : keys) {
    if (!options.contains(k)) continue;
    const nlohmann::json& v = options[k];
    const bool known = defaults.contains(k);
    if (known && defaults[k] == v) continue;
    items += "<li data-field=\"" + escape(k) + "\"><code>" + escape(k) + "=" +
             escape(html::value_text(v)) + "</code> <span class=\"default\">(" +
             escape(known ? "default " + html::value_text(defaults[k]) : "not a run option") +
             ")</span></li>\n";
  }
  if (items.empty()) return "<p class=\"empty\">every field at its default</p>\n";
  return "<ul class=\"scenario-diff\">\n" + items + "</ul>\n";
}

std::string fact(const char* name, const std::string& cls, const std::string& html_value) {
  return "<tr><th>" + std::string(name) + "</th><td class=\"" + cls + "\">" + html_value +
         "</td></tr>\n";
}

std::string render_failure(const SweepReportInput& in, const nlohmann::json& c, long long number) {
  const std::string outcome = outcome_of(c);
  const std::string id = string_at(c, "case", "?");
  std::string s = "<article class=\"failure outcome-" + outcome + "-failure\" id=\"case-" +
                  std::to_string(number) + "\" data-case=\"" + escape(id) + "\" data-index=\"" +
                  std::to_string(number) + "\">\n<h3><span class=\"case-cell outcome-" + outcome +
                  "\">" + grid_cell_text(outcome) + "</span> case " + std::to_string(number) +
                  ": " + escape(id) + " <span class=\"outcome\">(" +
                  escape(outcome_words(outcome)) + ")</span></h3>\n<table class=\"facts\">\n";
  std::vector<std::string> reasons = reasons_of(c);
  const std::string failure = string_at(c, "failure");
  if (const nlohmann::json* p = first_failed_property(c)) {
    s += fact("property", "property",
              "<b>" + escape(string_at(*p, "name", "?")) + "</b> (compared " +
                  escape(string_at(*p, "compared", "?")) + ")");
    s += fact("first differing value", "first-difference", escape(string_at(*p, "reason")));
    reasons.erase(reasons.begin());  // shown above
  } else if (!failure.empty() && outcome == "rank_failure") {
    // The record's typed cause (its one line) where it has one; older records only the text.
    const auto cause = c.find("cause");
    const std::string typed =
        cause != c.end() && cause->is_object() ? string_at(*cause, "line") : std::string();
    s += fact("cause", "cause", escape(typed.empty() ? rank_failure_cause(failure) : typed));
  } else if (!reasons.empty()) {
    s += fact("first reason", "first-difference", escape(reasons.front()));
    reasons.erase(reasons.begin());
  }
  s += fact("reproduce", "reproduce",
            "<pre class=\"repro\">" + escape(string_at(c, "repro", "(no repro command recorded)")) +
                "</pre>");
  const ShownScenario scenario = scenario_of(in, c);
  s += fact("scenario", "scenario-fields",
            "<p class=\"scenario-source\">" + escape(scenario.label) +
                ", the fields that differ from the defaults:</p>\n" +
                scenario_diff(scenario.options) +
                (scenario.still.empty() ? ""
                                        : "<p class=\"shrunk-failure\">shrunk, it still fails " +
                                              escape(scenario.still) + "</p>\n"));
  s += "</table>\n";
  if (!reasons.empty()) {
    s += "<p>also:</p>\n<ul class=\"reasons\">\n";
    for (const std::string& r : reasons) s += "<li class=\"reason\">" + escape(r) + "</li>\n";
    s += "</ul>\n";
  }
  if (!failure.empty())
    s += "<p>the failure as parity check reported it:</p>\n<pre class=\"failure-text\">" +
         escape(failure) + "</pre>\n";
  else if (!first_failed_property(c) && reasons_of(c).empty())
    s += "<p class=\"reason\">(no reason recorded)</p>\n";
  s += "<details><summary>the whole scenario (JSON)</summary>\n<pre class=\"scenario\">" +
       escape(scenario.options.dump(2)) + "</pre>\n</details>\n</article>\n";
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

void read_failure_files(const std::string& dir, SweepReportInput& input) {
  for (const nlohmann::json& c : input.cases) {
    const std::string file = string_at(c, "failure_file");
    if (file.empty() || input.failure_files.count(file)) continue;
    const std::optional<std::string> text = files::read(dir + "/" + file);
    if (!text) continue;
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) input.failure_files[file] = std::move(j);
  }
}

std::string render_sweep_report(const SweepReportInput& in) {
  std::vector<GridCase> grid;
  std::string failures;
  std::size_t failure_count = 0;
  for (std::size_t i = 0; i < in.cases.size(); ++i) {
    const nlohmann::json& c = in.cases[i];
    GridCase item;
    item.assignment = html::at(c, "assignment");
    item.id = string_at(c, "case", "?");
    item.outcome = outcome_of(c);
    item.index = index_of(c, i);
    if (item.outcome != "passed") {
      ++failure_count;
      item.link = "case-" + std::to_string(item.index);
      failures += render_failure(in, c, item.index);
    }
    grid.push_back(std::move(item));
  }
  std::string invalid;
  for (const nlohmann::json& v : html::array_at(in.summary, "invalid"))
    invalid += "<li class=\"invalid-case\"><code>" + escape(string_at(v, "case", "?")) +
               "</code>: " + escape(string_at(v, "reason")) + "</li>\n";

  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
                  escape(in.title) + "</title>\n<style>\n" + kStyle +
                  "\n</style>\n</head>\n<body>\n";
  s += render_header(in);
  s += "<section id=\"failures\">\n<h2>Failures (" + std::to_string(failure_count) + ")</h2>\n" +
       (failures.empty() ? "<p class=\"empty\">No case failed.</p>\n" : failures) + "</section>\n";
  s += render_baseline(in.summary);
  s += "<section id=\"grid\">\n<h2>Pass/fail by configuration</h2>\n" +
       render_grid(in.summary, grid) + "</section>\n";
  s += "<section id=\"metrics\">\n<h2>Metric errors per case</h2>\n" +
       render_metric_plots(in.cases) + "</section>\n";
  s += "<section id=\"times\">\n<h2>Time per case</h2>\n" + render_time_chart(in.cases) +
       "</section>\n";
  s += "<section id=\"invalid\">\n<h2>Invalid combinations</h2>\n" +
       (invalid.empty() ? "<p class=\"empty\">None.</p>\n" : "<ul>\n" + invalid + "</ul>\n") +
       "</section>\n</body>\n</html>\n";
  return s;
}

}  // namespace parity::sweep
