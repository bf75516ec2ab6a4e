// parity sweep --baseline (harness/sweep/baseline_folder.h): per case, by case
// id. tests/sweep/baseline.sh runs it end to end on real sweep folders.
#include <gtest/gtest.h>

#include "harness/sweep/baseline_folder.h"

namespace parity::sweep {
namespace {

nlohmann::ordered_json record(const std::string& id, const std::string& outcome) {
  return {{"case", id}, {"outcome", outcome}, {"report", nullptr}};
}

TEST(SweepBaseline, ASameOutcomeWithoutReportsIsComparedAndEqual) {
  BaselineFolder base{"base", {{"tp=1", record("tp=1", "rank_failure")}}};
  const SweepBaselineResult r = compare_cases_with_baseline(base, {record("tp=1", "rank_failure")});
  EXPECT_EQ(r.compared, 1);
  EXPECT_TRUE(r.differences.empty());
  EXPECT_FALSE(r.failed());
}

TEST(SweepBaseline, AChangedOutcomeIsADifferenceWithBothValues) {
  BaselineFolder base{"base", {{"tp=2", record("tp=2", "passed")}}};
  const SweepBaselineResult r = compare_cases_with_baseline(base, {record("tp=2", "rank_failure")});
  ASSERT_EQ(r.differences.size(), 1u);
  EXPECT_EQ(r.differences[0].case_id, "tp=2");
  EXPECT_EQ(r.differences[0].difference.what, "outcome");
  EXPECT_EQ(r.differences[0].difference.baseline, "passed");
  EXPECT_EQ(r.differences[0].difference.current, "rank_failure");
  EXPECT_TRUE(r.failed());
  EXPECT_NE(format_baseline_result(r).find("tp=2: outcome: baseline passed now rank_failure"),
            std::string::npos);
}

TEST(SweepBaseline, CasesTheBaselineLacksAreListedAndNothingComparedFails) {
  BaselineFolder base{"base", {{"tp=1", record("tp=1", "passed")}}};
  const SweepBaselineResult r = compare_cases_with_baseline(base, {record("tp=4", "passed")});
  EXPECT_EQ(r.compared, 0);
  EXPECT_EQ(r.not_in_baseline, std::vector<std::string>{"tp=4"});
  EXPECT_TRUE(r.failed()) << "a baseline that compared no case must not pass";
  EXPECT_NE(format_baseline_result(r).find("nothing compared"), std::string::npos);
  const nlohmann::ordered_json j = baseline_result_json(r);
  EXPECT_EQ(j.at("compared"), 0);
  EXPECT_EQ(j.at("not_in_baseline").size(), 1u);
}

}  // namespace
}  // namespace parity::sweep
