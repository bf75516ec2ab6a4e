// harness/sweep/summary.h: counts, CSV quoting, the JUnit XML's escaping and
// failures (tests/sweep/shards_merge.sh validates it against the schema).
#include "harness/sweep/summary.h"

#include <gtest/gtest.h>

namespace parity::sweep {
namespace {

using ojson = nlohmann::ordered_json;

ojson record(int index, const std::string& id, const std::string& outcome, double seconds,
             const std::string& reason = "") {
  ojson r = {{"case", id},
             {"index", index},
             {"assignment", {{"recompute", "selective:a,b"}}},
             {"outcome", outcome},
             {"seconds", seconds},
             {"failure", ""},
             {"repro", outcome == "passed" ? ojson() : ojson("parity repro D/failures/x.json")}};
  ojson p = {{"name", "sharded_reduction"},
             {"status", outcome == "passed" ? "PASS" : "FAIL"},
             {"reason", reason},
             {"max_rel", 1e-7}};
  r["report"] = {{"properties", ojson::array({p})}};
  return r;
}

Matrix two_case_matrix() {
  return expand_matrix(ojson::parse(R"({"axes": {"recompute": ["none", "selective:mlp"]},
                                        "exclude": [], "include": []})"),
                       "m.json");
}

TEST(SweepSummary, CountsOutcomesAndKeepsTheFirstRecordOfACase) {
  const Matrix m = two_case_matrix();
  const std::vector<ojson> cases =
      unique_cases({record(1, "b", "property_failed", 2.0), record(0, "a", "passed", 1.0),
                    record(1, "b", "passed", 3.0)});
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0].at("case"), "a");
  const ojson s = summary_json(m, cases, 5.0, "1/2");
  EXPECT_EQ(s.at("total"), 2);
  EXPECT_EQ(s.at("passed"), 1);
  EXPECT_EQ(s.at("failed"), 1);
  EXPECT_EQ(s.at("shard"), "1/2");
  EXPECT_EQ(s.at("slowest")[0].at("case"), "b");
  EXPECT_EQ(worst_property(cases[0]), "sharded_reduction rel 1e-07");
  EXPECT_EQ(worst_property(cases[1]), "sharded_reduction FAIL");
}

TEST(SweepSummary, CsvQuotesFieldsWithCommas) {
  const Matrix m = two_case_matrix();
  const std::string csv = results_csv(m, {record(0, "recompute=selective:a,b", "passed", 1.0)});
  EXPECT_EQ(csv,
            "case,index,recompute,outcome,seconds,worst_property,cause\n"
            "\"recompute=selective:a,b\",0,\"selective:a,b\",passed,1.000,sharded_reduction rel "
            "1e-07,\n");
}

ojson rank_failure_record() {
  ojson r = record(1, "b", "rank_failure", 2.0);
  r["report"] = {{"properties", ojson::array()}};
  r["failure"] =
      "parity check: run (c) scenario's sharding failed:\nrun failed: rank 1 hung, 1 victim "
      "(launch threads, world 2, timeout 5 s)\n  rank 1 (tp=1, cp=0, dp=0) hung: no progress for "
      "5.0 s; last collective: all_reduce(sum)\n  rank 0 (tp=0, cp=0, dp=0) victim, ...\n";
  return r;
}

TEST(SweepSummary, ARankFailuresCauseIsOneLineFromItsTypedCause) {
  ojson r = rank_failure_record();
  // A record from before records carried the cause: the first rank line.
  EXPECT_EQ(cause_line(r),
            "rank 1 (tp=1, cp=0, dp=0) hung: no progress for 5.0 s; last collective: "
            "all_reduce(sum)");
  r["cause"] = {{"run", "c"},
                {"run_title", "scenario's sharding"},
                {"kind", "hung"},
                {"rank", 1},
                {"line", "rank 1 (tp=1, cp=0, dp=0) hung: no progress"}};
  EXPECT_EQ(cause_line(r),
            "run (c) scenario's sharding: rank 1 (tp=1, cp=0, dp=0) hung: no progress");
  EXPECT_EQ(cause_line(record(0, "a", "passed", 1.0)), "");
  const Matrix m = two_case_matrix();
  const std::vector<ojson> cases = {record(0, "a", "passed", 1.0), r};
  const ojson s = summary_json(m, cases, 3.0, "");
  EXPECT_NE(summary_table(s, cases).find("  FAILED b: rank_failure (run (c) scenario's sharding: "
                                         "rank 1 (tp=1, cp=0, dp=0) hung: no progress)\n"),
            std::string::npos)
      << summary_table(s, cases);
  EXPECT_NE(
      results_csv(m, cases).find(",rank_failure,2.000,-,\"run (c) scenario's sharding: rank 1 "
                                 "(tp=1, cp=0, dp=0) hung: no progress\"\n"),
      std::string::npos)
      << results_csv(m, cases);
  const std::string xml = junit_xml("s", s, cases);
  EXPECT_NE(xml.find("<error message=\"run (c) scenario&#39;s sharding: rank 1 (tp=1, cp=0, dp=0) "
                     "hung: no progress\" type=\"rank_failure\">parity check: run (c)"),
            std::string::npos)
      << xml;
}

TEST(SweepSummary, SweepSecondsAddEachEarlierInvocationUpToItsLastCase) {
  auto by = [](const std::string& invocation, double at) {
    ojson r = record(0, "a" + std::to_string(at), "passed", 0.5);
    r["invocation"] = invocation;
    r["invocation_seconds"] = at;
    return r;
  };
  const std::vector<ojson> records = {by("one", 3.0), by("one", 7.0), by("two", 2.0),
                                      by("now", 1.0), record(5, "old", "passed", 9.0)};
  // one: 7, two: 2, now: its whole wall time 4; a record without an invocation adds nothing.
  EXPECT_DOUBLE_EQ(sweep_seconds(records, "now", 4.0), 13.0);
  EXPECT_DOUBLE_EQ(sweep_seconds({}, "now", 4.0), 4.0);
}

TEST(SweepSummary, JunitEscapesAndListsEachFailingPropertyWithItsRepro) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>\x01"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;?");
  const Matrix m = two_case_matrix();
  const std::vector<ojson> cases = {record(0, "a", "passed", 1.0),
                                    record(1, "b", "property_failed", 2.0, "x < y & z")};
  const std::string xml = junit_xml("parity sweep m.json", summary_json(m, cases, 3.0, ""), cases);
  EXPECT_NE(xml.find("<testsuite name=\"parity sweep m.json\" tests=\"2\" failures=\"1\" "
                     "errors=\"0\" time=\"3.000\""),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<testcase classname=\"parity.sweep\" name=\"a\" time=\"1.000\"/>"),
            std::string::npos);
  EXPECT_NE(xml.find("<failure message=\"sharded_reduction: x &lt; y &amp; z\" "
                     "type=\"sharded_reduction\">x &lt; y &amp; z\nparity repro "
                     "D/failures/x.json</failure>"),
            std::string::npos)
      << xml;
}

}  // namespace
}  // namespace parity::sweep
