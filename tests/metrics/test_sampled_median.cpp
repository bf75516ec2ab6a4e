// The sampled median (harness/metrics/statistics/sampled_median.h): the sample rule
// (distinct positions, stride coprime with n, deterministic), hand-computed
// medians on one rank (odd and even counts, several sites, an empty
// population), rejected placements, and over 8 thread ranks (tp2 x cp2 x dp2,
// Gloo, check_collectives on) the sharded result equal to the single rank's
// with uneven and empty shards; the fault median-unpadded-gather breaks the
// symmetry of the gather the correct path keeps. Rank threads only compute
// and record; assertions run after join (pitfalls.md).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "harness/faults/code_path_faults.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/metric_names.h"
#include "harness/metrics/sample_rule.h"
#include "harness/metrics/statistics/sampled_median.h"
#include "harness/parallel/communicator.h"
#include "harness/parallel/process_groups.h"
#include "tests/support/rank_threads.h"

PARITY_USES_FAULT(median_unpadded_gather);

namespace parity {
namespace {

constexpr SourceKind kKind = SourceKind::router_logits;

RankGroups single_rank_groups() {
  RankGroups g;
  for (auto [slot, axis] : {std::pair{&g.tp, Axis::tp}, std::pair{&g.cp, Axis::cp},
                            std::pair{&g.dp, Axis::dp}, std::pair{&g.world, Axis::world}})
    *slot = std::make_unique<Communicator>(axis, std::vector<int>{0}, 0, nullptr, nullptr,
                                           CommunicatorOptions{});
  return g;
}

MetricSite site_of(int layer) {
  return {"decoder.layers." + std::to_string(layer) + ".mlp.router", "router_logits", kKind};
}

std::shared_ptr<const Metric> median(std::int64_t factor, std::uint64_t seed = 0) {
  return make_sampled_median_metric("median", KindSet{kKind}, LabelScope::layer, seed, factor);
}

// Results by "label" of one rank holding every value whole (Replica everywhere).
std::map<std::string, double> on_one_rank(const std::shared_ptr<const Metric>& metric,
                                          const std::vector<at::Tensor>& layers) {
  MetricCollector c({metric}, ParallelTopology(1, 1, 1), 0);
  for (std::size_t l = 0; l < layers.size(); ++l)
    c.observe_placed(site_of(static_cast<int>(l)), layers[l], AxisPlacements{}, 1,
                     {0, 0, GraphPhase::eager});
  RankGroups g = single_rank_groups();
  MetricExecutor ex(g);
  std::map<std::string, double> out;
  for (const MetricResult& r : c.commit(ex)) out[r.label] = r.value;
  return out;
}

at::Tensor values(std::vector<double> v) {
  return at::tensor(v, at::TensorOptions().dtype(at::kDouble));
}

TEST(SampleRule, PositionsAreDistinctWithAStrideCoprimeWithN) {
  for (std::int64_t n = 0; n <= 120; ++n)
    for (std::int64_t factor : {1, 2, 3, 100})
      for (const char* name : {"decoder.layers.0.mlp.router.router_logits", "x"}) {
        const SampleRule rule = sample_rule(7, kKind, name, n, factor);
        ASSERT_EQ(rule.count, (n + factor - 1) / factor) << n;
        if (n > 1) {
          ASSERT_EQ(std::gcd(rule.stride, n), 1) << "n " << n << " stride " << rule.stride;
          ASSERT_GE(rule.start, 0);
          ASSERT_LT(rule.start, n);
          ASSERT_GE(rule.stride, 1);
          ASSERT_LT(rule.stride, n);
        }
        const at::Tensor p = sample_positions(rule, n);
        ASSERT_EQ(p.numel(), rule.count);
        std::set<std::int64_t> seen;
        for (std::int64_t i = 0; i < p.numel(); ++i) {
          const std::int64_t v = p[i].item<std::int64_t>();
          ASSERT_TRUE(v >= 0 && v < n) << v;
          ASSERT_EQ(v, (rule.start + i * rule.stride) % n);
          seen.insert(v);
        }
        ASSERT_EQ(static_cast<std::int64_t>(seen.size()), rule.count) << "repeated positions";
      }
}

TEST(SampleRule, DependsOnSeedKindAndNameOnly) {
  const SampleRule a = sample_rule(3, kKind, "decoder.layers.1.mlp.router.router_logits", 997, 10);
  const SampleRule b = sample_rule(3, kKind, "decoder.layers.1.mlp.router.router_logits", 997, 10);
  EXPECT_EQ(a.start, b.start);
  EXPECT_EQ(a.stride, b.stride);
  // n = 997 is prime: any other key almost surely moves start or stride.
  const auto differs = [&](const SampleRule& o) {
    return o.start != a.start || o.stride != a.stride;
  };
  EXPECT_TRUE(differs(sample_rule(4, kKind, "decoder.layers.1.mlp.router.router_logits", 997, 10)));
  EXPECT_TRUE(differs(sample_rule(3, kKind, "decoder.layers.2.mlp.router.router_logits", 997, 10)));
  EXPECT_TRUE(differs(sample_rule(3, SourceKind::router_scores,
                                  "decoder.layers.1.mlp.router.router_logits", 997, 10)));
  EXPECT_THROW(sample_rule(3, kKind, "x", 5, 0), std::invalid_argument);
}

TEST(SampledMedian, KeepingEveryElementIsTheMedianWithInterpolation) {
  // factor 1 keeps all n elements: the exact median.
  const auto r = on_one_rank(median(1), {values({3, 1, 2}), values({40, 10, 30, 20})});
  EXPECT_EQ(r.at("decoder.layers.0"), 2.0);
  EXPECT_EQ(r.at("decoder.layers.1"), 25.0);  // even count: (20 + 30) / 2
  EXPECT_EQ(r.at("global"), 10.0);            // {1, 2, 3, 10, 20, 30, 40}
  // An even global count interpolates between the two middle values.
  const auto even = on_one_rank(median(1), {values({1, 2, 3}), values({7, 9, 100})});
  EXPECT_EQ(even.at("global"), 5.0);  // (3 + 7) / 2
}

TEST(SampledMedian, SamplesTheSortedPopulationAtTheRulesPositions) {
  // 8 values, factor 3: ceil(8 / 3) = 3 order statistics, at the rule's positions.
  const at::Tensor x = values({80, 10, 70, 20, 60, 30, 50, 40});
  const double sorted[] = {10, 20, 30, 40, 50, 60, 70, 80};
  const SampleRule rule = sample_rule(5, kKind, site_of(0).full_name(), 8, 3);
  ASSERT_EQ(rule.count, 3);
  std::vector<double> sample;
  for (std::int64_t i = 0; i < 3; ++i) sample.push_back(sorted[(rule.start + i * rule.stride) % 8]);
  std::sort(sample.begin(), sample.end());
  const auto r = on_one_rank(median(3, 5), {x});
  EXPECT_EQ(r.at("decoder.layers.0"), sample[1]);
  // The element order of the observed tensor does not matter.
  EXPECT_EQ(on_one_rank(median(3, 5), {x.flip(0)}).at("decoder.layers.0"), sample[1]);
  // Two samples: the mean of both.
  const SampleRule two = sample_rule(5, kKind, site_of(0).full_name(), 4, 2);
  const double s4[] = {10, 20, 30, 40};
  const double want = (s4[two.start] + s4[(two.start + two.stride) % 4]) / 2;
  EXPECT_EQ(on_one_rank(median(2, 5), {values({40, 30, 20, 10})}).at("decoder.layers.0"), want);
}

TEST(SampledMedian, IsDeterministicAndKeyedOnTheSeed) {
  auto gen = at::detail::createCPUGenerator(3);
  const at::Tensor x = at::randn({64, 2, 8}, gen, at::TensorOptions().dtype(at::kDouble));
  const double a = on_one_rank(median(100, 11), {x}).at("global");
  EXPECT_EQ(on_one_rank(median(100, 11), {x.clone()}).at("global"), a);
  // A sample of ceil(1024 / 100) = 11 order statistics: other seeds draw others.
  std::set<double> seen;
  for (std::uint64_t seed = 0; seed < 8; ++seed)
    seen.insert(on_one_rank(median(100, seed), {x}).at("global"));
  EXPECT_GT(seen.size(), 1u);
}

TEST(SampledMedian, EmptyPopulationIsNaN) {
  const auto r = on_one_rank(median(1), {at::zeros({0, 2, 4}, at::kFloat)});
  EXPECT_TRUE(std::isnan(r.at("decoder.layers.0")));
  EXPECT_TRUE(std::isnan(r.at("global")));
  // An empty site next to a non-empty one adds nothing.
  EXPECT_EQ(on_one_rank(median(1), {at::zeros({0}, at::kDouble), values({4, 1, 9})}).at("global"),
            4.0);
}

TEST(SampledMedian, UpcastsLowPrecisionAndIntegerInputs) {
  const at::Tensor x = values({1, 2, 3, 5});
  MetricCollector c({median(1)}, ParallelTopology(1, 1, 1), 0);
  c.observe_placed(site_of(0), x.to(at::kBFloat16), {}, 1, {0, 0, GraphPhase::eager});
  c.observe_placed(site_of(1), x.to(at::kInt), {}, 1, {0, 0, GraphPhase::eager});
  RankGroups g = single_rank_groups();
  MetricExecutor ex(g);
  for (const MetricResult& r : c.commit(ex)) EXPECT_EQ(r.value, 2.5) << r.label;
  EXPECT_DOUBLE_EQ(on_one_rank(median(1), {values({0.1, 0.2})}).at("global"), 0.15);
}

TEST(SampledMedian, RejectsFlatShardAndOwned) {
  for (const Placement& bad : {Placement{make_flat_shard({4, 2}, 0, 8)}, Placement{Owned{0}}}) {
    MetricCollector c({median(1)}, ParallelTopology(2, 1, 1), 0);
    AxisPlacements p;
    p.at(Axis::tp) = bad;
    try {
      c.observe_placed(site_of(0), at::ones({8}), p, std::nullopt, {0, 0, GraphPhase::eager});
      ADD_FAILURE() << to_string(bad) << " accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("tp=" + to_string(bad)), std::string::npos) << what;
      EXPECT_NE(what.find("sampled median takes Shard and Replica"), std::string::npos) << what;
    }
  }
}

TEST(SampledMedian, ValuesOfOneResultMustShareTheirShardAxes) {
  const auto metric = median(1);
  Prepared a = metric->prepare({site_of(0), at::ones({4}), {}, false, std::nullopt});
  AxisPlacements split;
  split.at(Axis::dp) = Shard{0};
  Prepared b = metric->prepare({site_of(1), at::ones({4}), split, false, std::nullopt});
  try {
    metric->start({a, b});
    ADD_FAILURE() << "values with different relations accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sharded over none and site " + site_of(1).full_name() +
                                         " over dp"),
              std::string::npos)
        << e.what();
  }
}

TEST(SampledMedian, IsRegisteredForRouterLogitsPerLayer) {
  const auto specs = parse_metric_names("layer-router-logits-sampled-median");
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].kind, SourceKind::router_logits);
  EXPECT_EQ(specs[0].scope, LabelScope::layer);
  const auto metric = make_metric(specs[0]);
  EXPECT_TRUE(metric->accepts(SourceKind::router_logits));
  EXPECT_FALSE(metric->accepts(SourceKind::router_scores));
  // 300 values: ceil(300 / 100) = 3 order statistics of each layer's population.
  auto gen = at::detail::createCPUGenerator(4);
  const at::Tensor l0 = at::randn({10, 3, 10}, gen, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor l1 = at::randn({10, 3, 10}, gen, at::TensorOptions().dtype(at::kFloat));
  const auto r = on_one_rank(metric, {l0, l1});
  const auto whole = [&](int layer, const at::Tensor& t) {
    return SitePopulation{site_of(layer), t.reshape({-1})};
  };
  EXPECT_EQ(r.at("decoder.layers.0"),
            sampled_median_of({whole(0, l0)}, kSampledMedianSeed, 100).item<double>());
  EXPECT_EQ(
      r.at("global"),
      sampled_median_of({whole(0, l0), whole(1, l1)}, kSampledMedianSeed, 100).item<double>());
}

// ---- Sharded over 8 thread ranks -------------------------------------------

// Piece `index` of `sizes` along `dim`.
at::Tensor piece(const at::Tensor& t, std::int64_t dim, const std::vector<std::int64_t>& sizes,
                 int index) {
  std::int64_t offset = 0;
  for (int i = 0; i < index; ++i) offset += sizes[i];
  return t.narrow(dim, offset, sizes[index]);
}

// A [seq, batch, experts] tensor per layer: dp splits the batch, cp the
// sequence, tp the experts (dim 2) or the sequence (dim 0); two microbatches
// per rank split the local batch (the second may be empty).
struct Layout {
  std::vector<std::int64_t> shape{9, 5, 6};
  std::int64_t tp_dim = 2;
  std::vector<std::int64_t> tp_split{4, 2}, cp_split{7, 2}, dp_split{4, 1};
  at::ScalarType dtype = at::kDouble;
};

at::Tensor full_tensor(const Layout& l, int layer) {
  auto gen = at::detail::createCPUGenerator(50 + layer);
  return at::randn(l.shape, gen, at::TensorOptions().dtype(at::kDouble)).to(l.dtype);
}

GroupOptions checked() {
  GroupOptions o;
  o.timeout = std::chrono::milliseconds(20000);
  o.communicator.check_collectives = true;
  return o;
}

struct RankRun {
  std::map<std::string, double> values;                                 // by label
  std::map<std::string, std::pair<std::int64_t, std::uint64_t>> calls;  // axis: (count, hash)
};

RankRun run_rank(const Layout& l, std::int64_t factor, const ParallelTopology& topo, int rank,
                 RankGroups& groups) {
  const RankCoordinates co = topo.coordinates(rank);
  MetricCollector collector({median(factor)}, topo, rank);
  AxisPlacements p;
  p.at(Axis::tp) = Shard{l.tp_dim};
  p.at(Axis::cp) = Shard{0};
  p.at(Axis::dp) = Shard{1};
  for (int layer = 0; layer < 2; ++layer) {
    const at::Tensor mine = piece(full_tensor(l, layer), 1, l.dp_split, co.dp);
    const std::vector<std::int64_t> microbatches{mine.size(1) - mine.size(1) / 2, mine.size(1) / 2};
    for (int m = 0; m < 2; ++m) {
      at::Tensor x = piece(piece(mine, 1, microbatches, m), 0, l.cp_split, co.cp);
      // Under tp Shard(0) the tp pieces split each cp piece: sizes scaled to it.
      std::vector<std::int64_t> tp_split = l.tp_split;
      if (l.tp_dim == 0) tp_split = {x.size(0) - x.size(0) / 3, x.size(0) / 3};
      x = piece(x, l.tp_dim, tp_split, co.tp);
      collector.observe_placed(site_of(layer), x, p, 1, {0, m, GraphPhase::eager});
    }
  }
  MetricExecutor executor(groups);
  RankRun out;
  for (const MetricResult& r : collector.commit(executor)) out.values[r.label] = r.value;
  for (Axis a : {Axis::tp, Axis::cp, Axis::dp})
    out.calls[std::string(to_string(a))] = {groups.get(a).calls_issued(),
                                            groups.get(a).call_hash()};
  return out;
}

struct ShardedRun {
  testing::ThreadRun threads;
  std::vector<RankRun> ranks;
};

ShardedRun run_sharded(const Layout& l, std::int64_t factor,
                       std::optional<CodePathFault> fault = std::nullopt) {
  const ParallelTopology topo(2, 2, 2);
  ShardedRun out;
  out.ranks.resize(topo.world_size());
  out.threads = testing::run_thread_ranks(
      topo, checked(),
      [&](int rank, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        std::optional<CodePathFaultScope> scope;
        if (fault) scope.emplace(*fault);
        out.ranks[rank] = run_rank(l, factor, topo, rank, groups);
      });
  return out;
}

struct ShardedCase {
  std::string name;
  Layout layout;
  std::int64_t factor;
};

void PrintTo(const ShardedCase& c, std::ostream* os) { *os << c.name; }

class SampledMedianSharded : public ::testing::TestWithParam<ShardedCase> {};

TEST_P(SampledMedianSharded, EqualsTheSingleRankResult) {
  const ShardedCase& c = GetParam();
  const ShardedRun run = run_sharded(c.layout, c.factor);
  ASSERT_EQ(run.threads.report(), "");
  const auto single =
      on_one_rank(median(c.factor), {full_tensor(c.layout, 0), full_tensor(c.layout, 1)});
  ASSERT_EQ(single.size(), 3u);
  for (std::size_t rank = 0; rank < run.ranks.size(); ++rank) {
    EXPECT_EQ(run.ranks[rank].values.size(), 3u) << "rank " << rank;
    for (const auto& [label, want] : single) {
      ASSERT_FALSE(std::isnan(want)) << label;
      // The same elements on every layout: bitwise the same order statistics.
      EXPECT_EQ(run.ranks[rank].values.at(label), want) << "rank " << rank << " " << label;
    }
  }
  // Every member of each group issued the identical call sequence.
  const ParallelTopology topo(2, 2, 2);
  for (int a = 0; a < topo.world_size(); ++a)
    for (int b = a + 1; b < topo.world_size(); ++b) {
      const RankCoordinates x = topo.coordinates(a), y = topo.coordinates(b);
      const std::pair<const char*, bool> same_group[] = {{"tp", x.cp == y.cp && x.dp == y.dp},
                                                         {"cp", x.tp == y.tp && x.dp == y.dp},
                                                         {"dp", x.tp == y.tp && x.cp == y.cp}};
      for (const auto& [axis, peers] : same_group)
        if (peers) {
          EXPECT_EQ(run.ranks[a].calls.at(axis), run.ranks[b].calls.at(axis))
              << axis << " group of ranks " << a << " and " << b;
        }
    }
}

std::vector<ShardedCase> sharded_cases() {
  Layout
      vocab;  // experts split [4, 2], sequence [7, 2], batch [4, 1] -> microbatches [2, 2], [1, 0]
  Layout empty_expert_shard = vocab;
  empty_expert_shard.tp_split = {6, 0};
  empty_expert_shard.cp_split = {0, 9};
  Layout sequence_parallel = vocab;  // tp splits each cp piece of the sequence
  sequence_parallel.tp_dim = 0;
  Layout fp32 = vocab;
  fp32.dtype = at::kFloat;
  return {{"ExpertsOverTpFactor7", vocab, 7},
          {"EmptyShardsFactor3", empty_expert_shard, 3},
          {"SequenceParallelFactor1", sequence_parallel, 1},
          {"Fp32Factor100", fp32, 100}};
}

INSTANTIATE_TEST_SUITE_P(Layouts, SampledMedianSharded, ::testing::ValuesIn(sharded_cases()),
                         [](const auto& info) { return info.param.name; });

// Ranks holding different numbers of elements: with the fault each rank
// gathers its unpadded values and the shapes differ, which the communicators'
// fingerprint check reports as CollectiveMismatch (in Megatron, a hang); the
// correct path above issues identical calls on every member.
TEST(SampledMedianFaults, UnpaddedGatherIssuesDifferentShapesOnUnevenShards) {
  Layout uneven;  // every piece non-empty: every rank calls, so nothing waits for a timeout
  uneven.tp_split = {5, 1};
  uneven.cp_split = {6, 3};
  uneven.dp_split = {3, 2};
  const ShardedRun run = run_sharded(uneven, 3, fault_median_unpadded_gather);
  int mismatches = 0;
  for (const testing::RankOutcome& o : run.threads.outcomes)
    if (o.error_kind == "CollectiveMismatch") ++mismatches;
  EXPECT_GT(mismatches, 0) << run.threads.report();
  EXPECT_NE(run.threads.report().find("all_gather"), std::string::npos) << run.threads.report();
}

// Even shards hide the fault: the same shapes everywhere, the same result.
TEST(SampledMedianFaults, UnpaddedGatherIsHarmlessOnEvenShards) {
  Layout even;
  even.shape = {8, 4, 6};
  even.tp_split = {3, 3};
  even.cp_split = {4, 4};
  even.dp_split = {2, 2};
  const ShardedRun run = run_sharded(even, 3, fault_median_unpadded_gather);
  ASSERT_EQ(run.threads.report(), "");
  const auto single = on_one_rank(median(3), {full_tensor(even, 0), full_tensor(even, 1)});
  for (const RankRun& r : run.ranks) EXPECT_EQ(r.values, single);
}

}  // namespace
}  // namespace parity
