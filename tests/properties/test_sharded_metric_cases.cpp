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
  for (const auto* split : {&c.tp_split, &c.cp_split, &c.dp_split})
    for (std::int64_t n : *split) {
      uneven = uneven || n != split->front();
      empty = empty || n == 0;
    }
  RC_CLASSIFY(uneven, "uneven shards");
  RC_CLASSIFY(empty, "an empty shard");
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
  for (const auto* split : {&last.cp_split, &last.dp_split, &last.tp_split})
    for (std::int64_t n : *split) unequal = unequal || n != split->front();
  EXPECT_TRUE(unequal || last.microbatches == 2) << to_json(last).dump();
}

}  // namespace
}  // namespace parity::scenarios
