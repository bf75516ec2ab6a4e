// sharded_reduction where populations are unequal: generated tensors split over
// tp x cp x dp with uneven and empty shards and uneven microbatches
// (scenarios/sharded_metric_cases.h); every rank's statistics must equal those
// of the full tensor. The model's scenarios split evenly (as Megatron does), so
// this is where a mean of per-rank means would show. docs/property-suite.md.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <iostream>
#include <sstream>

#include "scenarios/quiet_listener.h"
#include "scenarios/sharded_metric_cases.h"

namespace parity {
// Readable parameter names in gtest's output (ADL: Axis lives in parity).
void PrintTo(Axis axis, std::ostream* os) { *os << to_string(axis); }
}  // namespace parity

namespace parity::scenarios {
namespace {

std::string describe(const ShardedMetricOutcome& o) {
  std::string s = o.rank_failure;
  for (std::size_t i = 0; i < o.mismatches.size() && i < 4; ++i) s += o.mismatches[i] + "\n";
  return s;
}

RC_GTEST_PROP(ShardedMetricCases, uneven_and_empty_shards_reduce_like_the_full_tensor, ()) {
  const ShardedMetricCase c = *gen_sharded_metric_case();
  bool uneven = false, empty = false;
  for (Axis axis : kModelAxes)
    for (std::int64_t n : c.axis(axis).split) {
      uneven = uneven || n != c.axis(axis).split.front();
      empty = empty || n == 0;
    }
  RC_CLASSIFY(uneven, "uneven shards");
  RC_CLASSIFY(empty, "an empty shard");
  for (Axis axis : kModelAxes)
    if ((axis == Axis::tp ? c.tp : axis == Axis::cp ? c.cp : c.dp) > 1)
      RC_TAG(std::string(to_string(c.axis(axis).holding)) + " on " + std::string(to_string(axis)));
  const ShardedMetricOutcome o = check_sharded_metric_case(c);
  RC_ASSERT(o.compared > 0);
  if (!o.passed()) RC_FAIL("sharded_reduction FAILED: " + describe(o));
}

// The property has teeth: with mean-of-means injected the same search finds a
// counterexample, and it shrinks to unequal populations.
TEST(ShardedMetricCases, catches_mean_of_means_with_unequal_populations) {
  ShardedMetricCase last;
  const QuietSearch search = search_quietly("ShardedMetricCases/catches_mean_of_means", [&] {
    ShardedMetricCase c = *gen_sharded_metric_case();
    c.inject = {"mean-of-means"};
    const ShardedMetricOutcome o = check_sharded_metric_case(c);
    RC_ASSERT(o.rank_failure.empty());
    if (!o.mismatches.empty()) {
      last = c;
      RC_FAIL(describe(o));
    }
  });
  ASSERT_TRUE(search.failed) << "mean-of-means was not caught:\n" << search.message;
  std::cout << "caught, as expected:\n" << search.message << std::endl;
  // A mean of means differs only where the shards' populations differ.
  bool unequal = false;
  for (Axis axis : kModelAxes)
    for (std::int64_t n : last.axis(axis).split)
      unequal = unequal || n != last.axis(axis).split.front();
  EXPECT_TRUE(unequal || last.microbatches == 2) << to_json(last).dump();
}

// Every axis may hold the tensor as Replica: with replica-overcount injected
// (Replica axes reduced as if sharded) the search over cases with Replica on
// that axis finds a counterexample, on tp, cp and dp alike. Shrinking is off:
// the catch is the point, not the smallest case.
class ShardedMetricCasesReplicaOvercount : public ::testing::TestWithParam<Axis> {};

TEST_P(ShardedMetricCasesReplicaOvercount, is_caught_with_replica_on_the_axis) {
  const Axis axis = GetParam();
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.disableShrinking = true;
  params.maxSuccess = 20;
  ShardedMetricCase last;
  const QuietSearch search = search_quietly(
      "ShardedMetricCases/replica_overcount_on_" + std::string(to_string(axis)),
      [&] {
        ShardedMetricCase c = *gen_sharded_metric_case(axis, AxisHolding::replica);
        // Only this axis is Replica: the catch is this axis's.
        for (Axis other : kModelAxes)
          RC_PRE(other == axis || c.axis(other).holding != AxisHolding::replica);
        c.inject = {"replica-overcount"};
        const ShardedMetricOutcome o = check_sharded_metric_case(c);
        RC_ASSERT(o.rank_failure.empty());
        if (!o.mismatches.empty()) {
          last = c;
          RC_FAIL(describe(o));
        }
      },
      params);
  ASSERT_TRUE(search.failed) << "replica-overcount on " << to_string(axis) << " was not caught:\n"
                             << search.message;
  EXPECT_EQ(last.axis(axis).holding, AxisHolding::replica) << to_json(last).dump();
  // l2 counts every replica: the l2 of the whole tensor is off.
  EXPECT_NE(search.message.find("l2@"), std::string::npos) << search.message;
}

INSTANTIATE_TEST_SUITE_P(EveryAxis, ShardedMetricCasesReplicaOvercount,
                         ::testing::Values(Axis::tp, Axis::cp, Axis::dp),
                         [](const ::testing::TestParamInfo<Axis>& i) {
                           return std::string(to_string(i.param));
                         });

// Without the fault the same searches pass: Replica and Owned on every axis
// reduce like the full tensor (the generator's coverage, deterministic cases).
TEST(ShardedMetricCases, replica_and_owned_on_every_axis_reduce_like_the_full_tensor) {
  for (Axis axis : kModelAxes)
    for (AxisHolding holding : {AxisHolding::replica, AxisHolding::owned}) {
      ShardedMetricCase c;
      c.tp = c.cp = c.dp = 2;
      c.seq = 5;
      c.batch = 3;
      c.hidden = 4;
      c.tp_dim = 2;
      c.tp_axis = {AxisHolding::shard, {3, 1}, 0};
      c.cp_axis = {AxisHolding::shard, {5, 0}, 0};  // an empty shard
      c.dp_axis = {AxisHolding::shard, {1, 2}, 0};
      AxisCase& forced = axis == Axis::tp ? c.tp_axis : axis == Axis::cp ? c.cp_axis : c.dp_axis;
      forced = {holding, {}, 1};
      c.microbatches = 2;
      c.statistics = sharded_case_statistics();
      const ShardedMetricOutcome o = check_sharded_metric_case(c);
      EXPECT_TRUE(o.passed()) << to_string(holding) << " on " << to_string(axis) << ": "
                              << describe(o) << to_json(c).dump();
      EXPECT_GT(o.compared, 0);
    }
}

}  // namespace
}  // namespace parity::scenarios
