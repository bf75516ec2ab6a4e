#include <gtest/gtest.h>

#include <set>

#include "harness/parallel/topology.h"

namespace parity {
namespace {

TEST(ParallelTopology, MegatronRankOrderTpFastestThenCpThenDp) {
  ParallelTopology t(2, 2, 2);
  EXPECT_EQ(t.world_size(), 8);
  EXPECT_EQ(t.coordinates(0), (RankCoordinates{0, 0, 0}));
  EXPECT_EQ(t.coordinates(1), (RankCoordinates{1, 0, 0}));
  EXPECT_EQ(t.coordinates(2), (RankCoordinates{0, 1, 0}));
  EXPECT_EQ(t.coordinates(5), (RankCoordinates{1, 0, 1}));
  EXPECT_EQ(t.coordinates(7), (RankCoordinates{1, 1, 1}));
  for (int r = 0; r < 8; ++r) EXPECT_EQ(t.rank_of(t.coordinates(r)), r);
}

TEST(ParallelTopology, GroupsPartitionTheWorldPerAxis) {
  ParallelTopology t(2, 3, 2);
  EXPECT_EQ(t.group_ranks(7, Axis::tp), (std::vector<int>{6, 7}));
  EXPECT_EQ(t.group_ranks(7, Axis::cp), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(t.group_ranks(7, Axis::dp), (std::vector<int>{1, 7}));
  for (Axis axis : kModelAxes) {
    std::set<int> seen;
    for (int r = 0; r < t.world_size(); ++r) {
      auto g = t.group_ranks(r, axis);
      EXPECT_EQ(static_cast<int>(g.size()), t.size(axis));
      EXPECT_EQ(g[t.coordinate(r, axis)], r);
      for (int member : g) EXPECT_EQ(t.group_name(member, axis), t.group_name(r, axis));
      seen.insert(g.begin(), g.end());
    }
    EXPECT_EQ(static_cast<int>(seen.size()), t.world_size());
  }
}

TEST(ParallelTopology, RejectsNonPositiveSizes) {
  EXPECT_THROW(ParallelTopology(0, 1, 1), std::invalid_argument);
  EXPECT_THROW(ParallelTopology(1, 1, 1).coordinates(1), std::out_of_range);
}

}  // namespace
}  // namespace parity
