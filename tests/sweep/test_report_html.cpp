// The sweep report page (harness/sweep/report_html.h) on the committed fixture
// (tests/sweep/fixture: real parity check reports of 12 cases, 6 invalid).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "harness/sweep/report_html.h"

namespace parity::sweep {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

SweepReportInput fixture() {
  SweepReportInput in;
  in.title = "parity sweep fixture";
  in.summary = nlohmann::json::parse(read_text(PARITY_SWEEP_FIXTURE "/summary.json"));
  std::istringstream lines(read_text(PARITY_SWEEP_FIXTURE "/results.jsonl"));
  std::string line;
  while (std::getline(lines, line))
    if (!line.empty()) in.cases.push_back(nlohmann::json::parse(line));
  return in;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The test's own escaping, independent of the page's.
std::string escaped(std::string s) {
  std::string out;
  for (const char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else if (c == '\'')
      out += "&#39;";
    else
      out += c;
  }
  return out;
}

std::string section(const std::string& page, const std::string& id) {
  const std::size_t begin = page.find("<section id=\"" + id + "\">");
  EXPECT_NE(begin, std::string::npos) << id;
  const std::size_t end = page.find("</section>", begin);
  return page.substr(begin, end - begin);
}

TEST(SweepReportHtml, FixtureHasWhatTheTestsNeed) {
  const SweepReportInput in = fixture();
  ASSERT_EQ(in.cases.size(), 12u);
  ASSERT_EQ(in.summary.at("invalid").size(), 6u);
}

TEST(SweepReportHtml, GridHasOneCellPerCaseAndInvalidCombination) {
  const SweepReportInput in = fixture();
  const std::string grid = section(render_sweep_report(in), "grid");
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-"), 18u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-passed\""), 4u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-property_failed\""), 4u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-rank_failure\""), 4u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-invalid\""), 6u);
  for (const nlohmann::json& c : in.cases)
    EXPECT_NE(grid.find("data-case=\"" + escaped(c.at("case")) + "\""), std::string::npos)
        << c.at("case");
  // Rows: the first half of the axes (tp), columns: the rest (dtype x inject).
  EXPECT_EQ(count(grid, "<th class=\"row\">"), 3u);
  EXPECT_EQ(count(grid, "<th class=\"column\">"), 6u);
  EXPECT_NE(grid.find("<th class=\"row\">tp=1</th>"), std::string::npos);
}

TEST(SweepReportHtml, OnePlotPerMetricWithItsToleranceLine) {
  const std::string metrics = section(render_sweep_report(fixture()), "metrics");
  EXPECT_EQ(count(metrics, "class=\"metric-plot\""), 3u);
  EXPECT_EQ(count(metrics, "<svg class=\"plot\""), 3u);
  EXPECT_EQ(count(metrics, "<path class=\"tolerance\""), 3u);
  for (const char* m : {"layer-residual-contribution-l2", "global-output-logits-l2",
                        "layer-residual-accumulator-rms"})
    EXPECT_NE(metrics.find("data-metric=\"" + std::string(m) + "\""), std::string::npos) << m;
  // The injected fault's errors are beyond the tolerance: red points.
  EXPECT_GT(count(metrics, "class=\"point fail"), 0u);
  EXPECT_GT(count(metrics, "class=\"point ok"), 0u);
}

TEST(SweepReportHtml, TimeChartHasOneBarPerCase) {
  const std::string times = section(render_sweep_report(fixture()), "times");
  EXPECT_EQ(count(times, "<g class=\"time-bar\">"), 12u);
}

TEST(SweepReportHtml, FailuresListEachReasonAndReproCommand) {
  const SweepReportInput in = fixture();
  const std::string failures = section(render_sweep_report(in), "failures");
  EXPECT_EQ(count(failures, "<article class=\"failure"), 8u);
  for (const nlohmann::json& c : in.cases) {
    if (c.at("outcome") == "passed") {
      EXPECT_EQ(failures.find("data-case=\"" + escaped(c.at("case")) + "\""), std::string::npos);
      continue;
    }
    EXPECT_NE(failures.find("<pre class=\"repro\">" + escaped(c.at("repro")) + "</pre>"),
              std::string::npos)
        << c.at("case");
    if (c.at("outcome") == "property_failed") {
      bool any = false;
      for (const nlohmann::json& p : c.at("report").at("properties"))
        if (p.at("status") == "FAIL") {
          any = true;
          const std::string line =
              p.at("name").get<std::string>() + ": " + p.at("reason").get<std::string>();
          EXPECT_NE(failures.find(escaped(line)), std::string::npos) << line;
        }
      EXPECT_TRUE(any) << c.at("case");
    } else {
      EXPECT_NE(failures.find(escaped(c.at("failure"))), std::string::npos) << c.at("case");
    }
  }
}

TEST(SweepReportHtml, EveryStringIsEscaped) {
  SweepReportInput in = fixture();
  in.title = "<b>title</b>";
  for (nlohmann::json& c : in.cases)
    if (c.at("outcome") == "property_failed") {
      for (nlohmann::json& p : c["report"]["properties"])
        if (p.at("status") == "FAIL") p["reason"] = "<script>alert('x')</script> & more";
      c["case"] = "tp=\"2\" <img>";
      c["repro"] = "parity repro 'a b'/<x>.json";
      break;
    }
  const std::string page = render_sweep_report(in);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("<b>title"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"),
            std::string::npos);
  EXPECT_NE(page.find("data-case=\"tp=&quot;2&quot; &lt;img&gt;\""), std::string::npos);
  EXPECT_NE(page.find("parity repro &#39;a b&#39;/&lt;x&gt;.json"), std::string::npos);
  EXPECT_NE(page.find("<title>&lt;b&gt;title&lt;/b&gt;</title>"), std::string::npos);
}

TEST(SweepReportHtml, SelfContainedWithoutNetworkOrScript) {
  const std::string page = render_sweep_report(fixture());
  for (const char* s : {"http://", "https://", "<script", "<link", " src=", "@import", "url("})
    EXPECT_EQ(page.find(s), std::string::npos) << s;
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("</html>"), std::string::npos);
}

TEST(SweepReportHtml, HeaderShowsTheTotals) {
  const std::string page = render_sweep_report(fixture());
  EXPECT_NE(page.find("<td class=\"total\" data-key=\"total\">18</td>"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"total\" data-key=\"passed\">4</td>"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"total\" data-key=\"invalid\">6</td>"), std::string::npos);
}

TEST(SweepReportHtml, AllPassedAndNoMetricsSaySo) {
  SweepReportInput in = fixture();
  std::vector<nlohmann::json> kept;
  for (nlohmann::json c : in.cases)
    if (c.at("outcome") == "passed") {
      c["report"]["metrics"] = nlohmann::json::array();
      kept.push_back(c);
    }
  in.cases = kept;
  const std::string page = render_sweep_report(in);
  EXPECT_NE(section(page, "failures").find("No case failed."), std::string::npos);
  EXPECT_NE(section(page, "metrics").find("nothing to plot"), std::string::npos);
  EXPECT_EQ(count(page, "class=\"metric-plot\""), 0u);
}

// Files written by other programs (or a half-written sweep): wrong types and
// missing keys are shown as unknown, never thrown.
TEST(SweepReportHtml, OddInputsRenderWithoutThrowing) {
  SweepReportInput in;
  in.summary = nlohmann::json::array({1, 2});
  in.cases = {nlohmann::json(3),
              {{"case", "a=1"}, {"seconds", "slow"}, {"report", 5}, {"outcome", "exploded"}},
              {{"case", "a=2"},
               {"assignment", {{"a", 2}}},
               {"outcome", "property_failed"},
               {"report",
                {{"properties", nullptr}, {"metrics", {{{"metric", "m"}, {"max_rel", "inf"}}}}}}}};
  std::string page;
  ASSERT_NO_THROW(page = render_sweep_report(in));
  EXPECT_EQ(count(section(page, "grid"), "class=\"case-cell outcome-"), 3u);
  EXPECT_EQ(count(page, "class=\"case-cell outcome-unknown\""), 2u);
  EXPECT_EQ(count(page, "class=\"metric-plot\""), 1u);
  EXPECT_EQ(count(page, "(no reason recorded)"), 3u);
}

}  // namespace
}  // namespace parity::sweep
