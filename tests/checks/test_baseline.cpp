// compare_with_baseline and read_baseline_report (harness/checks/baseline.h) on
// hand-built reports in report_json's shape (docs/report-schema.md).
#include <gtest/gtest.h>

#include "harness/base/files.h"
#include "harness/checks/baseline.h"
#include "harness/config/run_config.h"

namespace parity::checks {
namespace {

nlohmann::json report(ModelDType dtype = ModelDType::fp32) {
  RunConfig c;
  c.dtype = dtype;
  nlohmann::json r;
  r["schema"] = "parity-check-report";
  r["scenario"] = to_json(c);
  r["properties"] = nlohmann::json::array(
      {{{"name", "exactly_once"}, {"status", "PASS"}, {"reason", "ok"}},
       {{"name", "sharded_reduction"}, {"status", "PASS"}, {"reason", "ok"}}});
  r["metrics"] = nlohmann::json::array({{{"metric", "layer-residual-contribution-l2"},
                                         {"label", "decoder.layers.1"},
                                         {"value", 1.234},
                                         {"reference", 1.234}},
                                        {{"metric", "global-output-logits-l2"},
                                         {"label", "global"},
                                         {"value", 30.5},
                                         {"reference", 30.5}}});
  return r;
}

TEST(Baseline, UnchangedReportHasNoDifference) {
  EXPECT_TRUE(compare_with_baseline(report(), report()).empty());
}

TEST(Baseline, MetricBeyondToleranceIsOneDifferenceWithBothValues) {
  nlohmann::json now = report();
  now["metrics"][0]["value"] = 1.240;
  const std::vector<BaselineDifference> d = compare_with_baseline(report(), now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].what, "metric layer-residual-contribution-l2 decoder.layers.1");
  EXPECT_EQ(d[0].baseline, "1.234");
  EXPECT_EQ(d[0].current, "1.24");
  EXPECT_EQ(d[0].reason, "rel 0.0049 > fp32 tolerance 1e-05");
  EXPECT_EQ(format_difference(d[0]),
            "metric layer-residual-contribution-l2 decoder.layers.1: baseline 1.234 now 1.24 "
            "(rel 0.0049 > fp32 tolerance 1e-05)");
}

TEST(Baseline, MetricWithinToleranceIsNoDifference) {
  nlohmann::json now = report();
  now["metrics"][0]["value"] = 1.234 * (1 + 1e-7);  // fp32 tolerance: rel 1e-5
  EXPECT_TRUE(compare_with_baseline(report(), now).empty());
}

TEST(Baseline, ToleranceFollowsTheCurrentScenariosPrecision) {
  // The same move within fp32's tolerance is beyond fp64's (1e-10).
  nlohmann::json base = report(ModelDType::fp64), now = report(ModelDType::fp64);
  now["metrics"][1]["value"] = 30.5 * (1 + 1e-7);
  const std::vector<BaselineDifference> d = compare_with_baseline(base, now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].reason.find("> fp64 tolerance 1e-10"), std::string::npos) << d[0].reason;
}

TEST(Baseline, ReferenceThatMovedIsADifference) {
  nlohmann::json now = report();
  now["metrics"][1]["reference"] = 31.0;
  const std::vector<BaselineDifference> d = compare_with_baseline(report(), now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].what, "metric global-output-logits-l2 global (reference)");
}

TEST(Baseline, StatusChangeIsOneDifference) {
  nlohmann::json now = report();
  now["properties"][1]["status"] = "FAIL";
  now["properties"][1]["reason"] = "rel 0.4 > fp32 rel 1e-05";
  const std::vector<BaselineDifference> d = compare_with_baseline(report(), now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].what, "property sharded_reduction");
  EXPECT_EQ(d[0].baseline, "PASS");
  EXPECT_EQ(d[0].current, "FAIL");
  EXPECT_NE(d[0].reason.find("rel 0.4"), std::string::npos);
}

// A property parity gained after the baseline was stored: not a difference
// while it passes or skips (upgrades keep stored baselines), one when it FAILs.
TEST(Baseline, APropertyNewSinceTheBaselineCountsOnlyWhenItFails) {
  nlohmann::json now = report();
  now["properties"].push_back({{"name", "router_invariance"}, {"status", "SKIP"}, {"reason", "-"}});
  EXPECT_TRUE(compare_with_baseline(report(), now).empty());
  now["properties"][2]["status"] = "FAIL";
  now["properties"][2]["reason"] = "digest differs";
  const std::vector<BaselineDifference> d = compare_with_baseline(report(), now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].what, "property router_invariance");
  EXPECT_EQ(d[0].current, "FAIL");
  EXPECT_EQ(d[0].reason, "not in the baseline, and FAILs now: digest differs");
  // A property the baseline had and the check no longer evaluates still is one.
  nlohmann::json fewer = report();
  fewer["properties"].erase(1);
  EXPECT_EQ(compare_with_baseline(report(), fewer).size(), 1u);
}

TEST(Baseline, MetricOnOneSideOnlyIsListed) {
  nlohmann::json fewer = report();
  fewer["metrics"].erase(1);
  std::vector<BaselineDifference> d = compare_with_baseline(report(), fewer);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].what, "metric global-output-logits-l2 global");
  EXPECT_EQ(d[0].current, "missing");
  d = compare_with_baseline(fewer, report());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].baseline, "missing");
  EXPECT_EQ(d[0].current, "30.5");
}

TEST(Baseline, NanAndInfinityCompareLikeTheReport) {
  nlohmann::json base = report(), now = report();
  base["metrics"][0]["value"] = nullptr;  // NaN
  now["metrics"][0]["value"] = nullptr;
  base["metrics"][1]["value"] = "inf";
  now["metrics"][1]["value"] = "inf";
  EXPECT_TRUE(compare_with_baseline(base, now).empty());
  now["metrics"][0]["value"] = 1.234;
  ASSERT_EQ(compare_with_baseline(base, now).size(), 1u);
}

TEST(Baseline, DifferentScenarioIsListedOutputPathsAside) {
  nlohmann::json now = report();
  now["scenario"]["report"] = "elsewhere.json";
  EXPECT_TRUE(compare_with_baseline(report(), now).empty());
  now["scenario"]["tp"] = 4;
  const std::vector<BaselineDifference> d = compare_with_baseline(report(), now);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].what, "scenario tp");
  EXPECT_EQ(d[0].current, "4");
}

TEST(Baseline, EmptyBaselineComparesNothingAndSaysSo) {
  nlohmann::json base = report();
  base["properties"] = nlohmann::json::array();
  const std::vector<BaselineDifference> d = compare_with_baseline(base, report());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].reason, "the baseline report compares nothing");
}

TEST(Baseline, ReadNamesTheFileAndTheReason) {
  files::TempDir dir;
  const std::string missing = dir.path() + "/missing.json";
  try {
    read_baseline_report(missing);
    FAIL() << "no throw";
  } catch (const BaselineError& e) {
    EXPECT_EQ(std::string(e.what()),
              missing + ": no such file (expected a parity check --report JSON)");
  }
  const std::string torn = dir.path() + "/torn.json";
  files::write_atomically(torn, "{\"schema\": ");
  EXPECT_THROW(read_baseline_report(torn), BaselineError);
  const std::string other = dir.path() + "/other.json";
  files::write_atomically(other, "{\"schema\": \"parity-sweep-case\"}");
  try {
    read_baseline_report(other);
    FAIL() << "no throw";
  } catch (const BaselineError& e) {
    EXPECT_NE(std::string(e.what()).find("not a parity check report"), std::string::npos);
  }
  const std::string good = dir.path() + "/good.json";
  files::write_atomically(good, report().dump());
  EXPECT_EQ(read_baseline_report(good), report());
}

}  // namespace
}  // namespace parity::checks
