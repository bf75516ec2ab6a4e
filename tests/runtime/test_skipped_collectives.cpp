// A collective that only some ranks of a group call. Under --check-collectives
// every group ends with a barrier (rank_body.cpp), so a rank that ends its
// program while a peer still waits in a call it skipped meets that call with
// a fingerprint mismatch naming both ranks. Without fingerprints the peers
// wait out the timeout, and the failure report says, for each rank stuck in a
// collective, which members of its group never entered that call.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>

#include "harness/config/launch_mapping.h"
#include "harness/parallel/communicator.h"
#include "harness/runtime/launcher.h"

namespace parity {
namespace {

// "test-skip-last" {"axis": A}: one all_reduce on axis A, which the group's
// last member skips; then the program ends.
void register_skip_last() {
  register_rank_program("test-skip-last", [](RankContext& ctx) {
    Communicator& group = ctx.group(ctx.arguments["axis"] == "ep" ? Axis::ep : Axis::tp);
    if (group.rank() != group.size() - 1)
      group.all_reduce(at::ones({2}, at::kFloat), ReduceOp::sum);
    return nlohmann::json::object();
  });
}

RunConfig two_ranks(int tp, int dp, int ep) {
  RunConfig c;
  c.tp = tp;
  c.cp = 1;
  c.dp = dp;
  c.ep = ep;
  c.sp = false;
  c.timeout = 60;
  return c;
}

TEST(SkippedCollectives, ACallSkippedAtTheEndMeetsTheExitBarrierNamingBothRanks) {
  register_skip_last();
  RunConfig c = two_ranks(2, 1, 1);
  c.check_collectives = true;
  const LaunchResult r =
      launch(launch_spec_from(c), "test-skip-last", nlohmann::json{{"axis", "tp"}});
  ASSERT_FALSE(r.ok());
  const std::string text = r.failure->text();
  EXPECT_NE(text.find("collective mismatch on tp group [0, 1]: rank 0 called all_reduce(sum) on "
                      "tp, float32 [2], #0 but rank 1 called barrier on tp, #0"),
            std::string::npos)
      << text;
}

// The EP group lies inside the dp group here ({0, 1} both): the exit barriers
// start with EP, or rank 1 would wait for rank 0 in the dp barrier while rank
// 0 waits in the EP call.
TEST(SkippedCollectives, AnEpCallSkippedMeetsTheEpExitBarrierBeforeTheDpOne) {
  register_skip_last();
  RunConfig c = two_ranks(1, 2, 2);
  c.check_collectives = true;
  const LaunchResult r =
      launch(launch_spec_from(c), "test-skip-last", nlohmann::json{{"axis", "ep"}});
  ASSERT_FALSE(r.ok());
  const std::string text = r.failure->text();
  EXPECT_NE(text.find("collective mismatch on ep group [0, 1]: rank 0 called all_reduce(sum) on "
                      "ep, float32 [2], #0 but rank 1 called barrier on ep, #0"),
            std::string::npos)
      << text;
}

// Without fingerprints rank 0 waits in the tp call until the timeout while
// rank 1 waits in the world's exit barrier: each line names whom it waited for,
// and as they wait for each other neither is a victim.
TEST(SkippedCollectives, WithoutFingerprintsTheHangReportNamesTheRankThatNeverEnteredTheCall) {
  register_skip_last();
  RunConfig c = two_ranks(2, 1, 1);
  c.timeout = 2;
  const LaunchResult r =
      launch(launch_spec_from(c), "test-skip-last", nlohmann::json{{"axis", "tp"}});
  ASSERT_FALSE(r.ok());
  const std::string text = r.failure->text();
  int named = 0;
  for (const RankFailure& f : r.failure->ranks) {
    const std::string waits = f.rank == 0 ? "waiting in #0 on tp for rank 1 (it entered none)"
                                          : "waiting in #0 on world for rank 0 (it entered none)";
    named += f.detail.find(waits) != std::string::npos ? 1 : 0;
    EXPECT_FALSE(f.victim) << text;
  }
  EXPECT_EQ(named, 2) << text;
}

}  // namespace
}  // namespace parity
