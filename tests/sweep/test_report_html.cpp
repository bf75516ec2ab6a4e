// The sweep report page (harness/sweep/report_html.h) on the committed fixture
// (tests/sweep/fixture: a real `parity sweep --shrink` of 11 cases, 6 invalid,
// 1 excluded; make_fixture.py).
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
  read_failure_files(PARITY_SWEEP_FIXTURE, in);
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
  if (begin == std::string::npos) return "";
  const std::size_t end = page.find("</section>", begin);
  return page.substr(begin, end - begin);
}

// The failure article of the case with this id.
std::string article(const std::string& page, const std::string& id) {
  const std::size_t begin = page.find("<article class=\"failure");
  const std::size_t at = page.find("data-case=\"" + escaped(id) + "\"", begin);
  EXPECT_NE(at, std::string::npos) << id;
  if (begin == std::string::npos || at == std::string::npos) return "";
  const std::size_t start = page.rfind("<article", at);
  return page.substr(start, page.find("</article>", at) - start);
}

const nlohmann::json& first_case(const SweepReportInput& in, const std::string& outcome) {
  for (const nlohmann::json& c : in.cases)
    if (c.at("outcome") == outcome) return c;
  ADD_FAILURE() << "the fixture has no " << outcome;
  return in.cases.front();
}

TEST(SweepReportHtml, FixtureHasWhatTheTestsNeed) {
  const SweepReportInput in = fixture();
  ASSERT_EQ(in.cases.size(), 11u);
  ASSERT_EQ(in.summary.at("invalid").size(), 6u);
  ASSERT_EQ(in.summary.at("excluded"), 1);
  ASSERT_EQ(in.failure_files.size(), 7u);  // every case that did not pass
  // Indices skip the excluded and invalid combinations: a position is not a number.
  ASSERT_EQ(in.cases.back().at("index"), 10);
  EXPECT_NE(first_case(in, "rank_failure").at("failure").get<std::string>().find('\n'),
            std::string::npos);
}

TEST(SweepReportHtml, VerdictAndFailuresComeBeforeTheGridAndThePlots) {
  const std::string page = render_sweep_report(fixture());
  const std::size_t verdict = page.find("id=\"verdict\"");
  const std::size_t failures = page.find("<section id=\"failures\">");
  const std::size_t grid = page.find("<section id=\"grid\">");
  const std::size_t metrics = page.find("<section id=\"metrics\">");
  const std::size_t times = page.find("<section id=\"times\">");
  ASSERT_NE(verdict, std::string::npos);
  EXPECT_LT(verdict, failures);
  EXPECT_LT(failures, grid);
  EXPECT_LT(grid, metrics);
  EXPECT_LT(metrics, times);
}

TEST(SweepReportHtml, VerdictSaysHowTheSweepEnded) {
  SweepReportInput in = fixture();
  EXPECT_NE(render_sweep_report(in).find(
                "data-verdict=\"failed\">FAILED: 7 of 11 cases failed (4 property failures, 3 "
                "rank failures); did not run: 6 invalid, 1 excluded</p>"),
            std::string::npos);
  std::vector<nlohmann::json> passed;
  for (const nlohmann::json& c : in.cases)
    if (c.at("outcome") == "passed") passed.push_back(c);
  in.cases = passed;
  EXPECT_NE(render_sweep_report(in).find("data-verdict=\"passed\">PASSED: all 4 cases passed"),
            std::string::npos);
  in.cases.clear();
  EXPECT_NE(render_sweep_report(in).find("data-verdict=\"nothing_ran\">NO CASE RAN"),
            std::string::npos);
}

TEST(SweepReportHtml, GridHasOneCellPerCaseInvalidAndExcludedCombination) {
  const SweepReportInput in = fixture();
  const std::string grid = section(render_sweep_report(in), "grid");
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-"), 18u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-passed\""), 4u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-property_failed\""), 4u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-rank_failure\""), 3u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-invalid\""), 6u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-excluded\""), 1u);
  EXPECT_NE(grid.find("data-case=\"tp=2 dtype=fp64 inject=throw-rank=1\" "
                      "title=\"tp=2 dtype=fp64 inject=throw-rank=1: excluded by the matrix"),
            std::string::npos);
  for (const nlohmann::json& c : in.cases)
    EXPECT_NE(grid.find("data-case=\"" + escaped(c.at("case")) + "\""), std::string::npos)
        << c.at("case");
  // Rows: the first half of the axes (tp), columns: the rest (dtype x inject). Six
  // columns as wide as inject=["sqrt-before-sum"] do not fit 1280 pixels: two parts of 3.
  EXPECT_EQ(count(grid, "<table class=\"grid\">"), 2u);
  EXPECT_EQ(count(grid, "<th class=\"row\">"), 6u);
  EXPECT_EQ(count(grid, "<th class=\"column\">"), 6u);
  EXPECT_NE(grid.find("<caption>columns 1&ndash;3 of 6</caption>"), std::string::npos);
  EXPECT_NE(grid.find("<caption>columns 4&ndash;6 of 6</caption>"), std::string::npos);
  EXPECT_NE(grid.find("<th class=\"row\">tp=1</th>"), std::string::npos);
  // The legend names every kind of cell, the excluded ones included.
  for (const char* o : {"passed", "property_failed", "rank_failure", "invalid", "excluded"})
    EXPECT_NE(grid.find("<span class=\"legend-entry\" data-outcome=\"" + std::string(o) + "\">"),
              std::string::npos)
        << o;
  EXPECT_EQ(grid.find("data-outcome=\"not_run\""), std::string::npos);  // none here
}

// scenarios/sweeps/cpu-64.json's shape: 7 axes, so 16 columns (sp x recompute x
// graphs x dtype), 32 excluded (tp 2 without sp) and 32 invalid (tp 1 with sp).
SweepReportInput cpu64() {
  SweepReportInput in;
  in.summary = {{"axes", {"tp", "cp", "dp", "sp", "recompute", "graphs", "dtype"}},
                {"matrix",
                 {{"axes",
                   {{"tp", {1, 2}},
                    {"cp", {1, 2}},
                    {"dp", {1, 2}},
                    {"sp", {false, true}},
                    {"recompute", {"none", "selective:core_attn,mlp"}},
                    {"graphs", {"none", "per-layer"}},
                    {"dtype", {"fp32", "fp64"}}}},
                  {"exclude", {{{"tp", 2}, {"sp", false}}}}}},
                {"invalid", nlohmann::json::array()},
                {"excluded", 32}};
  int index = 0;
  for (int tp : {1, 2})
    for (int cp : {1, 2})
      for (int dp : {1, 2})
        for (bool sp : {false, true})
          for (const char* r : {"none", "selective:core_attn,mlp"})
            for (const char* g : {"none", "per-layer"})
              for (const char* d : {"fp32", "fp64"}) {
                const nlohmann::json a = {{"tp", tp},       {"cp", cp},    {"dp", dp},  {"sp", sp},
                                          {"recompute", r}, {"graphs", g}, {"dtype", d}};
                const std::string id = "case" + std::to_string(index);
                if (tp == 1 && sp)
                  in.summary["invalid"].push_back(
                      {{"case", id}, {"assignment", a}, {"reason", "sp needs tp > 1"}});
                else if (!(tp == 2 && !sp))
                  in.cases.push_back({{"case", id},
                                      {"index", index},
                                      {"assignment", a},
                                      {"outcome", "passed"},
                                      {"seconds", 1.0}});
                ++index;
              }
  return in;
}

TEST(SweepReportHtml, SixteenColumnGridWrapsIntoParts) {
  const std::string grid = section(render_sweep_report(cpu64()), "grid");
  // Each column in one part; each part repeats the 8 row headers.
  EXPECT_EQ(count(grid, "<th class=\"column\">"), 16u);
  EXPECT_EQ(count(grid, "<th class=\"row\">"), 8u * count(grid, "<table class=\"grid\">"));
  EXPECT_GE(count(grid, "<table class=\"grid\">"), 2u);
  EXPECT_LE(count(grid, "<table class=\"grid\">"), 8u);
  EXPECT_NE(grid.find("<caption>columns 1&ndash;"), std::string::npos);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-passed\""), 64u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-invalid\""), 32u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-excluded\""), 32u);
  // One axis=value per header line: the column is as wide as its widest value.
  EXPECT_NE(grid.find("<th class=\"column\">sp=false<br>recompute=none<br>graphs=none<br>"
                      "dtype=fp32</th>"),
            std::string::npos);
}

TEST(SweepReportHtml, CombinationsNotRunYetHaveTheirOwnCellAndLegend) {
  SweepReportInput in = cpu64();
  in.cases.resize(60);  // another shard ran the last 4
  const std::string grid = section(render_sweep_report(in), "grid");
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-not_run\""), 4u);
  EXPECT_EQ(count(grid, "class=\"case-cell outcome-excluded\""), 32u);
  EXPECT_NE(grid.find("data-outcome=\"not_run\""), std::string::npos);
}

TEST(SweepReportHtml, PlotsOnlyMetricsWithAnErrorAndFoldsTheRestIntoOneLine) {
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
  // The NaN and Inf counts are 0 in every case and run: one line, no plot.
  EXPECT_EQ(count(metrics, "<p id=\"folded-metrics\""), 1u);
  EXPECT_NE(metrics.find("<p id=\"folded-metrics\" data-count=\"2\">2 metrics with no error in "
                         "any case (max rel error 0), not plotted: "),
            std::string::npos);
  for (const char* m : {"layer-residual-accumulator-nan-count", "global-output-logits-inf-count"}) {
    EXPECT_NE(
        metrics.find("<code class=\"folded-metric\">" + std::string(m) + "</code> (0 everywhere)"),
        std::string::npos)
        << m;
    EXPECT_EQ(metrics.find("data-metric=\"" + std::string(m) + "\""), std::string::npos) << m;
  }
}

TEST(SweepReportHtml, PlotsLabelTheirAxes) {
  const std::string page = render_sweep_report(fixture());
  const std::string metrics = section(page, "metrics");
  EXPECT_EQ(count(metrics, "class=\"axis-label y-label\""), 3u);
  EXPECT_EQ(count(metrics, "class=\"axis-label x-label\""), 3u);
  EXPECT_EQ(count(metrics, ">max rel error</text>"), 3u);
  EXPECT_EQ(count(metrics, ">case (index, as in failures/)</text>"), 3u);
  const std::string times = section(page, "times");
  EXPECT_NE(times.find("text-anchor=\"end\">case</text>"), std::string::npos);
  EXPECT_NE(times.find(">seconds (the longest bar: "), std::string::npos);
}

TEST(SweepReportHtml, CasesAreNumberedByTheirIndex) {
  const SweepReportInput in = fixture();
  const std::string page = render_sweep_report(in);
  const std::string metrics = section(page, "metrics");
  const std::string times = section(page, "times");
  for (const nlohmann::json& c : in.cases) {
    const std::string n = std::to_string(c.at("index").get<int>());
    EXPECT_EQ(count(metrics, "\" y=\"222\" text-anchor=\"middle\">" + n + "<title>" +
                                 escaped(c.at("case")) + "</title>"),
              3u)
        << n;
    EXPECT_NE(times.find("text-anchor=\"end\">" + n + "</text><rect"), std::string::npos) << n;
    if (c.at("outcome") == "passed") continue;
    const std::string a = article(page, c.at("case"));
    EXPECT_EQ(a.find("<article class=\"failure outcome-" + c.at("outcome").get<std::string>() +
                     "-failure\" id=\"case-" + n + "\""),
              0u);
    EXPECT_NE(a.find("</span> case " + n + ": "), std::string::npos) << n;
    EXPECT_NE(page.find("href=\"#case-" + n + "\""), std::string::npos) << n;
    // The failure file has the same number.
    EXPECT_NE(c.at("failure_file")
                  .get<std::string>()
                  .find("failures/" + std::string(4 - n.size(), '0') + n + "-"),
              std::string::npos);
  }
}

TEST(SweepReportHtml, PropertyFailureShowsPropertyFirstDifferenceReproAndShrunkFields) {
  const SweepReportInput in = fixture();
  const std::string page = render_sweep_report(in);
  std::size_t articles = 0;
  for (const nlohmann::json& c : in.cases) {
    if (c.at("outcome") != "property_failed") continue;
    ++articles;
    const std::string a = article(page, c.at("case"));
    const nlohmann::json* failed = nullptr;
    for (const nlohmann::json& p : c.at("report").at("properties"))
      if (p.at("status") == "FAIL" && !failed) failed = &p;
    ASSERT_NE(failed, nullptr);
    EXPECT_NE(a.find("<td class=\"property\"><b>" + failed->at("name").get<std::string>() + "</b>"),
              std::string::npos);
    EXPECT_NE(a.find("<td class=\"first-difference\">" + escaped(failed->at("reason")) + "</td>"),
              std::string::npos);
    EXPECT_NE(a.find("<pre class=\"repro\">" + escaped(c.at("repro")) + "</pre>"),
              std::string::npos);
    // The saved scenario, as the fields that differ from RunConfig's defaults.
    const nlohmann::json& saved = in.failure_files.at(c.at("failure_file"));
    EXPECT_NE(a.find("shrunk scenario (" + escaped(c.at("failure_file")) +
                     "; by parity sweep "
                     "--shrink: "),
              std::string::npos);
    EXPECT_NE(
        a.find("<li data-field=\"inject\"><code>inject=" + escaped(saved.at("inject").dump()) +
               "</code> <span class=\"default\">(default [])</span></li>"),
        std::string::npos);
    EXPECT_NE(a.find("<li data-field=\"dp\"><code>dp=2</code> <span class=\"default\">(default "
                     "1)</span></li>"),
              std::string::npos);
    EXPECT_EQ(a.find("<li data-field=\"seed\">"), std::string::npos);  // at its default
    EXPECT_EQ(a.find("<li data-field=\"about\">"), std::string::npos);
    EXPECT_LT(count(a, "<li data-field="), saved.size() / 2);
    // What the shrunk scenario itself fails with.
    EXPECT_NE(a.find("<p class=\"shrunk-failure\">shrunk, it still fails " +
                     escaped(saved.at("about").at("property").get<std::string>() + ": " +
                             saved.at("about").at("reason").get<std::string>()) +
                     "</p>"),
              std::string::npos);
  }
  EXPECT_EQ(articles, 4u);
}

TEST(SweepReportHtml, RankFailureKeepsItsLinesAndNamesTheCulprit) {
  const SweepReportInput in = fixture();
  const std::string page = render_sweep_report(in);
  const nlohmann::json& c = first_case(in, "rank_failure");
  const std::string a = article(page, c.at("case"));
  const std::string text = c.at("failure");
  // Line breaks kept: the text as it was, in an element that keeps them.
  EXPECT_NE(a.find("<pre class=\"failure-text\">" + escaped(text) + "</pre>"), std::string::npos);
  // The cause: the rank that threw, not its victims.
  const std::size_t culprit = text.find("rank 1 (");
  ASSERT_NE(culprit, std::string::npos);
  const std::string line = text.substr(culprit, text.find('\n', culprit) - culprit);
  EXPECT_NE(line.find(") threw: injected fault: throw-rank=1"), std::string::npos) << line;
  EXPECT_NE(a.find("<td class=\"cause\">" + escaped(line) + "</td>"), std::string::npos);
  EXPECT_NE(a.find("<pre class=\"repro\">" + escaped(c.at("repro")) + "</pre>"), std::string::npos);
  EXPECT_NE(a.find("scenario as it ran (" + escaped(c.at("failure_file")) +
                   "; --shrink shrinks property failures only)"),
            std::string::npos);
  EXPECT_NE(a.find("<li data-field=\"inject\"><code>inject=[&quot;throw-rank=1&quot;]</code>"),
            std::string::npos);
}

TEST(SweepReportHtml, WithoutItsFailureFileAFailureShowsItsReportsScenario) {
  SweepReportInput in = fixture();
  in.failure_files.clear();
  const nlohmann::json& c = first_case(in, "property_failed");
  const std::string a = article(render_sweep_report(in), c.at("case"));
  EXPECT_NE(a.find("scenario of the case&#39;s report (" + escaped(c.at("failure_file")) +
                   " was not read)"),
            std::string::npos);
  EXPECT_NE(a.find("<li data-field=\"inject\">"), std::string::npos);
}

TEST(SweepReportHtml, TimeChartHasOneBarPerCase) {
  const std::string times = section(render_sweep_report(fixture()), "times");
  EXPECT_EQ(count(times, "<g class=\"time-bar\">"), 11u);
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
  EXPECT_NE(page.find("<td class=\"total\" data-key=\"total\">11</td>"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"total\" data-key=\"passed\">4</td>"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"total\" data-key=\"invalid\">6</td>"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"total\" data-key=\"excluded\">1</td>"), std::string::npos);
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
               {"failure_file", 7},
               {"report",
                {{"properties", nullptr}, {"metrics", {{{"metric", "m"}, {"max_rel", "inf"}}}}}}}};
  in.failure_files["x"] = 4;
  std::string page;
  ASSERT_NO_THROW(page = render_sweep_report(in));
  EXPECT_EQ(count(section(page, "grid"), "class=\"case-cell outcome-"), 3u);
  EXPECT_EQ(count(page, "class=\"case-cell outcome-unknown\""), 4u);  // 2 in the grid, 2 headings
  EXPECT_EQ(count(page, "class=\"metric-plot\""), 1u);
  EXPECT_EQ(count(page, "(no reason recorded)"), 3u);
}

TEST(SweepReportHtml, ReadFailureFilesSkipsWhatItCannotRead) {
  SweepReportInput in = fixture();
  in.failure_files.clear();
  read_failure_files(PARITY_SWEEP_FIXTURE "/no-such-folder", in);
  EXPECT_TRUE(in.failure_files.empty());
}

}  // namespace
}  // namespace parity::sweep
