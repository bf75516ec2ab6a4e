#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

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
  EXPECT_THROW(ParallelTopology(1, 1, 1, 0), std::invalid_argument);
}

TEST(ParallelTopology, EpMustDivideCpTimesDp) {
  EXPECT_THROW(ParallelTopology(1, 1, 2, 3), std::invalid_argument);
  EXPECT_THROW(ParallelTopology(2, 2, 1, 4), std::invalid_argument);  // tp is not EP's to use
  EXPECT_NO_THROW(ParallelTopology(2, 2, 2, 4));
  EXPECT_EQ(ParallelTopology(2, 1, 1).ep(), 1);  // the three-argument form: no EP
}

// Megatron's expert rank order tp-ep-edp over the same world: with j = cp +
// CP*dp, ep_rank = j mod EP and the expert-data-parallel index = j / EP.
TEST(ParallelTopology, EpGroupsFollowMegatronsExpertRankOrder) {
  // tp2 cp2 dp2 ep2: j = cp + 2*dp, so EP pairs the two cp ranks of a dp rank.
  ParallelTopology t(2, 2, 2, 2);
  EXPECT_EQ(t.group_ranks(0, Axis::ep), (std::vector<int>{0, 2}));
  EXPECT_EQ(t.group_ranks(5, Axis::ep), (std::vector<int>{5, 7}));
  EXPECT_EQ(t.ep_rank(6), 1);  // (tp 0, cp 1, dp 1): j = 3
  EXPECT_EQ(t.expert_data_parallel_rank(6), 1);
  EXPECT_EQ(t.group_name(7, Axis::ep), "ep.tp1.edp1");
  // tp1 cp2 dp2 ep4: one EP group spanning cp and dp.
  EXPECT_EQ(ParallelTopology(1, 2, 2, 4).group_ranks(3, Axis::ep), (std::vector<int>{0, 1, 2, 3}));
  // tp2 cp1 dp4 ep2: EP groups run along dp, edp counts pairs of dp ranks.
  ParallelTopology d(2, 1, 4, 2);
  EXPECT_EQ(d.group_ranks(5, Axis::ep), (std::vector<int>{5, 7}));
  EXPECT_EQ(d.expert_data_parallel_rank(5), 1);
  // tp1 cp3 dp2 ep3: the groups are the cp groups.
  EXPECT_EQ(ParallelTopology(1, 3, 2, 3).group_ranks(4, Axis::ep), (std::vector<int>{3, 4, 5}));
  // tp1 cp3 dp2 ep2: a group may join the last cp rank of one dp rank to the
  // first of the next (j = 2, 3: rank 2 is cp2 dp0, rank 3 is cp0 dp1).
  ParallelTopology across(1, 3, 2, 2);
  EXPECT_EQ(across.group_ranks(2, Axis::ep), (std::vector<int>{2, 3}));
  EXPECT_EQ(across.coordinates(3), (RankCoordinates{0, 0, 1}));
}

// Megatron's expert RankGenerator(tp=etp, ep, dp=edp, cp=1, order tp-cp-ep-dp-pp)
// over the same ranks: within a stage, rank f = etp + ETP*(ep + EP*edp).
TEST(ParallelTopology, ExpertTensorParallelFollowsMegatronsExpertRankGenerator) {
  // tp2 dp2, etp1 ep2: the EP groups are the TP pairs, EDP runs along dp.
  ParallelTopology below(2, 1, 2, 2, 1, 1);
  EXPECT_EQ(below.etp(), 1);
  EXPECT_EQ(below.expert_dp(), 2);
  EXPECT_EQ(below.group_ranks(1, Axis::ep), (std::vector<int>{0, 1}));
  EXPECT_EQ(below.group_ranks(1, Axis::etp), (std::vector<int>{1}));
  EXPECT_EQ(below.group_ranks(1, Axis::edp), (std::vector<int>{1, 3}));
  EXPECT_EQ(below.group_name(3, Axis::ep), "ep.etp0.edp1");
  EXPECT_EQ(below.group_name(3, Axis::edp), "edp.etp0.ep1");
  // tp1 dp4, etp2 ep2: expert TP pairs DP ranks, EP pairs the pairs.
  ParallelTopology above(1, 1, 4, 2, 1, 2);
  EXPECT_EQ(above.group_ranks(2, Axis::etp), (std::vector<int>{2, 3}));
  EXPECT_EQ(above.group_ranks(2, Axis::ep), (std::vector<int>{0, 2}));
  EXPECT_EQ(above.group_ranks(2, Axis::edp), (std::vector<int>{2}));
  EXPECT_EQ(above.expert_tp_rank(3), 1);
  EXPECT_EQ(above.ep_rank(3), 1);
  EXPECT_EQ(above.group_name(3, Axis::etp), "etp.ep1.edp0");
  // Pipeline stages: each stage tiles its own ranks (tp2 cp2 pp2, etp4).
  ParallelTopology staged(2, 2, 1, 1, 2, 4);
  EXPECT_EQ(staged.group_ranks(5, Axis::etp), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(staged.group_name(5, Axis::etp), "etp.ep0.edp0.pp1");
  // Every expert axis partitions the world; each rank sits at its coordinate.
  for (const ParallelTopology& t : {below, above, staged, ParallelTopology(4, 1, 2, 2, 1, 2)})
    for (Axis axis : {Axis::etp, Axis::ep, Axis::edp}) {
      std::set<int> seen;
      for (int r = 0; r < t.world_size(); ++r) {
        const std::vector<int> g = t.group_ranks(r, axis);
        EXPECT_EQ(static_cast<int>(g.size()), t.size(axis));
        EXPECT_EQ(g[static_cast<std::size_t>(t.coordinate(r, axis))], r);
        for (int member : g) EXPECT_EQ(t.group_name(member, axis), t.group_name(r, axis));
        seen.insert(g.begin(), g.end());
      }
      EXPECT_EQ(static_cast<int>(seen.size()), t.world_size());
    }
  // etp = tp is the layout without --etp (names included).
  ParallelTopology same(2, 2, 2, 2, 1, 2);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(same.group_ranks(r, Axis::ep), ParallelTopology(2, 2, 2, 2).group_ranks(r, Axis::ep));
    EXPECT_EQ(same.group_ranks(r, Axis::etp), same.group_ranks(r, Axis::tp));
  }
  EXPECT_EQ(same.group_name(7, Axis::ep), "ep.tp1.edp1");
  // Failure reports name the expert coordinates when the experts have a TP size of their own.
  EXPECT_EQ(to_string(below.coordinates(3)), "(tp=1, cp=0, dp=1, etp=0, ep=1, edp=1)");
  EXPECT_EQ(to_string(same.coordinates(3)), "(tp=1, cp=1, dp=0)");
  // The expert layout must tile the stage (Megatron's RuntimeError).
  EXPECT_THROW(ParallelTopology(2, 1, 1, 2, 1, 2), std::invalid_argument);  // 4 over 2 ranks
  EXPECT_THROW(ParallelTopology(1, 1, 3, 1, 1, 2), std::invalid_argument);
  EXPECT_NO_THROW(ParallelTopology(2, 1, 1, 2, 1, 1));  // ep 2 over the TP pair
}

TEST(ParallelTopology, EpGroupsPartitionTheWorldForEveryLayout) {
  struct Layout {
    int tp, cp, dp, ep;
  };
  for (const Layout& l : {Layout{1, 1, 1, 1}, Layout{2, 1, 2, 2}, Layout{1, 2, 1, 2},
                          Layout{2, 2, 2, 2}, Layout{2, 2, 2, 4}, Layout{1, 3, 2, 3},
                          Layout{1, 3, 2, 2}, Layout{1, 2, 3, 6}, Layout{2, 1, 4, 2}}) {
    ParallelTopology t(l.tp, l.cp, l.dp, l.ep);
    const std::string layout = "tp" + std::to_string(l.tp) + " cp" + std::to_string(l.cp) + " dp" +
                               std::to_string(l.dp) + " ep" + std::to_string(l.ep);
    std::set<int> seen;
    std::set<std::string> names;
    for (int r = 0; r < t.world_size(); ++r) {
      const std::vector<int> g = t.group_ranks(r, Axis::ep);
      ASSERT_EQ(static_cast<int>(g.size()), l.ep) << layout;
      EXPECT_EQ(t.size(Axis::ep), l.ep);
      EXPECT_EQ(g[t.ep_rank(r)], r) << layout << " rank " << r;
      EXPECT_EQ(t.coordinate(r, Axis::ep), t.ep_rank(r));
      for (int member : g) {
        // Expert tensor parallel = tp: an EP group never mixes tp ranks.
        EXPECT_EQ(t.coordinates(member).tp, t.coordinates(r).tp) << layout;
        EXPECT_EQ(t.group_name(member, Axis::ep), t.group_name(r, Axis::ep)) << layout;
        EXPECT_EQ(t.group_ranks(member, Axis::ep), g) << layout;
      }
      names.insert(t.group_name(r, Axis::ep));
      seen.insert(g.begin(), g.end());
    }
    EXPECT_EQ(static_cast<int>(seen.size()), t.world_size()) << layout;
    EXPECT_EQ(static_cast<int>(names.size()), t.world_size() / l.ep) << layout;
  }
}

// Megatron's default order "tp-cp-ep-dp-pp": the pipeline stage is the slowest
// index, so a stage is a contiguous block of tp*cp*dp ranks.
TEST(ParallelTopology, PipelineStageIsTheSlowestIndex) {
  ParallelTopology t(2, 1, 2, 1, 2);
  EXPECT_EQ(t.world_size(), 8);
  EXPECT_EQ(t.pp(), 2);
  RankCoordinates c = t.coordinates(6);  // tp 0, dp 1, stage 1
  EXPECT_EQ(c.tp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  EXPECT_TRUE(c.pipelined);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(t.rank_of(t.coordinates(r)), r);
  EXPECT_EQ(t.group_ranks(6, Axis::pp), (std::vector<int>{2, 6}));
  EXPECT_EQ(t.group_ranks(6, Axis::dp), (std::vector<int>{4, 6}));
  EXPECT_EQ(t.group_ranks(6, Axis::tp), (std::vector<int>{6, 7}));
  EXPECT_EQ(t.coordinate(6, Axis::pp), 1);
  EXPECT_EQ(to_string(c), "(tp=0, cp=0, dp=1, pp=1)");
}

TEST(ParallelTopology, WithoutStagesNamesAndCoordinatesStayAsTheyWere) {
  ParallelTopology t(2, 2, 2);
  EXPECT_EQ(t.pp(), 1);
  EXPECT_FALSE(t.coordinates(5).pipelined);
  EXPECT_EQ(to_string(t.coordinates(5)), "(tp=1, cp=0, dp=1)");
  EXPECT_EQ(t.group_name(5, Axis::tp), "tp.cp0.dp1");
  EXPECT_EQ(t.group_ranks(5, Axis::pp), (std::vector<int>{5}));
  EXPECT_THROW(ParallelTopology(1, 1, 1, 1, 0), std::invalid_argument);
}

// Every axis partitions the world, groups of one name are the same group, and
// no two groups share a name (names are store prefixes), with and without EP.
TEST(ParallelTopology, PipelineGroupsPartitionTheWorldAndNamesAreUnique) {
  for (const auto& [tp, cp, dp, ep, pp] : std::vector<std::array<int, 5>>{
           {2, 1, 2, 1, 2}, {1, 2, 2, 2, 2}, {2, 2, 1, 1, 4}, {1, 1, 4, 4, 2}, {1, 1, 1, 1, 4}}) {
    const ParallelTopology t(tp, cp, dp, ep, pp);
    std::map<std::string, std::set<int>> members;  // name -> ranks
    for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::ep, Axis::pp}) {
      std::set<int> seen;
      for (int r = 0; r < t.world_size(); ++r) {
        const std::vector<int> g = t.group_ranks(r, axis);
        EXPECT_EQ(static_cast<int>(g.size()), t.size(axis));
        EXPECT_EQ(g[static_cast<std::size_t>(t.coordinate(r, axis))], r);
        for (int m : g)
          EXPECT_EQ(t.coordinates(m).pp == t.coordinates(r).pp, axis != Axis::pp || m == r);
        members[t.group_name(r, axis)].insert(g.begin(), g.end());
        seen.insert(g.begin(), g.end());
      }
      EXPECT_EQ(static_cast<int>(seen.size()), t.world_size());
    }
    // A name names one group: its members are exactly one group's ranks.
    for (const auto& [name, ranks] : members)
      for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::ep, Axis::pp})
        if (name.rfind(std::string(to_string(axis)) + ".", 0) == 0) {
          EXPECT_EQ(static_cast<int>(ranks.size()), t.size(axis)) << name;
        }
  }
}

}  // namespace
}  // namespace parity
