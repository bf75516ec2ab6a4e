// Every metric over sharded observations equals the same metric of the full
// tensor: 8 thread ranks (tp2 x cp2 x dp2) over Gloo, with --check-collectives
// on, for each placement combination (tp Replica / Shard(0) / Shard(-1), cp
// Shard(seq), dp Shard(batch), Owned, FlatShard), with uneven and empty shards
// and empty microbatches. Also: batching issues fewer collectives than
// requests, a wrong placement gives a different value, asymmetric requests are
// reported as CollectiveMismatch. Rank threads only compute and record; every
// assertion runs after join (pitfalls.md).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <map>
#include <sstream>

#include "harness/faults/code_path_faults.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/statistics/dimwise_metrics.h"
#include "harness/metrics/statistics/logical_metrics.h"
#include "tests/support/rank_threads.h"

PARITY_USES_FAULT(cp_population_dropped);
PARITY_USES_FAULT(dp_population_dropped);
PARITY_USES_FAULT(mean_of_means);
PARITY_USES_FAULT(replica_overcount);
PARITY_USES_FAULT(sqrt_before_sum);

namespace parity {
namespace {

using testing::run_thread_ranks;

// Uneven split of n over k ranks: rank 0 takes the rest, others n / (k + 1)
// (n = 2, k = 2 gives [2, 0]: an empty shard).
std::vector<std::int64_t> skew(std::int64_t n, int k) {
  std::vector<std::int64_t> sizes(k, n / (k + 1));
  sizes[0] = n - (n / (k + 1)) * (k - 1);
  return sizes;
}

at::Tensor slice_skew(const at::Tensor& t, std::int64_t dim, int rank, int size) {
  const auto sizes = skew(t.size(dim), size);
  std::int64_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += sizes[r];
  return t.narrow(dim, offset, sizes[rank]);
}

struct Layout {
  enum Kind { replica, shard, owned, flat } kind = replica;
  std::int64_t dim = 0;                                       // shard: dim of the full tensor
  int owner = 0;                                              // owned
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;  // flat: per rank [start, end)
  std::optional<Placement> announced;                         // a (deliberately) different label
};
Layout replica() { return Layout{}; }
Layout shard(std::int64_t dim) {
  Layout l;
  l.kind = Layout::shard;
  l.dim = dim;
  return l;
}
Layout owned(int rank) {
  Layout l;
  l.kind = Layout::owned;
  l.owner = rank;
  return l;
}
Layout flat(std::vector<std::pair<std::int64_t, std::int64_t>> ranges) {
  Layout l;
  l.kind = Layout::flat;
  l.ranges = std::move(ranges);
  return l;
}

struct Case {
  std::string name;
  std::vector<std::int64_t> shape;
  Layout tp, cp, dp;
  int microbatches = 1;  // per rank, split along dim 1 after dp
  at::ScalarType dtype = at::kDouble;
  bool distributions = false;  // softmax over the last dim (entropy inputs)
  bool nonfinite = false;      // plant NaN and Inf (only the counts are compared)
};

std::vector<std::shared_ptr<const Metric>> metrics_for(const Case& c) {
  const KindSet k{SourceKind::residual_accumulator};
  std::vector<std::shared_ptr<const Metric>> m;
  const std::pair<const char*, LogicalStatistic> logical[] = {
      {"l2", LogicalStatistic::l2},
      {"max", LogicalStatistic::max},
      {"abs-max", LogicalStatistic::abs_max},
      {"min", LogicalStatistic::min},
      {"mean", LogicalStatistic::mean},
      {"rms", LogicalStatistic::rms},
      {"nan-count", LogicalStatistic::nan_count},
      {"inf-count", LogicalStatistic::inf_count}};
  for (const auto& [name, st] : logical)
    m.push_back(make_logical_metric(st, name, k, LabelScope::layer));
  if (c.shape.size() > 1 || c.tp.kind == Layout::flat) {
    m.push_back(
        make_dimwise_metric(DimwiseStatistic::mean_row_l2, "mean-row-l2", k, LabelScope::layer));
    m.push_back(make_dimwise_metric(DimwiseStatistic::mean_column_l2, "mean-column-l2", k,
                                    LabelScope::layer));
  }
  if (c.distributions)
    m.push_back(make_dimwise_metric(DimwiseStatistic::entropy, "entropy", k, LabelScope::layer));
  return m;
}

// The full tensor of layer `layer` (deterministic, fp64 before the cast).
at::Tensor full_tensor(const Case& c, int layer) {
  auto gen = at::detail::createCPUGenerator(1000 + layer);
  at::Tensor x = at::randn(c.shape, gen, at::TensorOptions().dtype(at::kDouble));
  if (c.distributions) x = at::softmax(x * 2, -1);
  if (c.nonfinite) {
    auto flat = x.view({-1});
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (std::int64_t i = layer; i < flat.numel(); i += 7) flat[i] = nan;
    for (std::int64_t i = 3; i < flat.numel(); i += 11) flat[i] = (i % 2) ? inf : -inf;
  }
  return x.to(c.dtype);
}

Placement announced(const Layout& l, std::int64_t start, std::int64_t end,
                    const std::vector<std::int64_t>& shape) {
  if (l.announced) return *l.announced;
  switch (l.kind) {
    case Layout::replica:
      return Replica{};
    case Layout::shard:
      return Shard{l.dim};
    case Layout::owned:
      return Owned{l.owner};
    case Layout::flat:
      return make_flat_shard(shape, start, end);
  }
  return Replica{};
}

// Applies one axis' layout to this rank's (partial) tensor.
at::Tensor apply(const Layout& l, const at::Tensor& t, int coordinate, int size) {
  switch (l.kind) {
    case Layout::replica:
      return t;
    case Layout::shard:
      return slice_skew(t, l.dim, coordinate, size);
    case Layout::owned:
      return t;  // see placeholder_if_not_owner
    case Layout::flat: {
      const auto [s, e] = l.ranges[coordinate];
      return t.reshape({-1}).narrow(0, s, e - s);
    }
  }
  return t;
}

struct RankResult {
  std::map<std::string, double> values;  // "metric@label"
  ExecutorStats stats;
  std::int64_t calls = 0;  // tp + cp + dp communicator calls during commit
};

RankResult run_rank(const Case& c, const ParallelTopology& topo, int rank, RankGroups& groups) {
  const RankCoordinates co = topo.coordinates(rank);
  MetricCollector collector(metrics_for(c), topo, rank);
  for (int layer = 0; layer < 2; ++layer) {
    const at::Tensor full = full_tensor(c, layer);
    at::Tensor mine = apply(c.dp, full, co.dp, topo.dp());
    for (int mb = 0; mb < c.microbatches; ++mb) {
      at::Tensor x = c.microbatches > 1 ? slice_skew(mine, 1, mb, c.microbatches) : mine;
      x = apply(c.cp, x, co.cp, topo.cp());
      x = apply(c.tp, x, co.tp, topo.tp());
      // A rank that does not own the value passes garbage: it must be ignored.
      if ((c.tp.kind == Layout::owned && co.tp != c.tp.owner) ||
          (c.cp.kind == Layout::owned && co.cp != c.cp.owner) ||
          (c.dp.kind == Layout::owned && co.dp != c.dp.owner))
        x = at::full({2, 1, 1}, 1e6, x.options());
      AxisPlacements p;
      const Layout* layouts[3] = {&c.tp, &c.cp, &c.dp};
      const int coords[3] = {co.tp, co.cp, co.dp};
      for (int a = 0; a < 3; ++a) {
        std::int64_t s = 0, e = 0;
        if (layouts[a]->kind == Layout::flat) std::tie(s, e) = layouts[a]->ranges[coords[a]];
        p.axes[a] = announced(*layouts[a], s, e, c.shape);
      }
      collector.observe_placed({"decoder.layers." + std::to_string(layer), "residual_accumulator",
                                SourceKind::residual_accumulator},
                               x, p, c.tp.kind == Layout::flat ? OptionalDim() : OptionalDim(1),
                               {0, mb, GraphPhase::eager});
    }
  }
  const std::int64_t before =
      groups.tp->calls_issued() + groups.cp->calls_issued() + groups.dp->calls_issued();
  MetricExecutor executor(groups);
  RankResult out;
  for (const auto& r : collector.commit(executor)) out.values[r.metric + "@" + r.label] = r.value;
  out.stats = executor.stats();
  out.calls =
      groups.tp->calls_issued() + groups.cp->calls_issued() + groups.dp->calls_issued() - before;
  return out;
}

// Direct computation on the full tensors, in fp64.
std::map<std::string, double> expected(const Case& c) {
  std::map<std::string, double> e;
  std::vector<at::Tensor> all;
  std::vector<at::Tensor> rows_all, cols_all, ent_all;
  auto put = [&](const std::string& label, const at::Tensor& flat, const at::Tensor& rows,
                 const at::Tensor& cols, const at::Tensor& ent) {
    e["l2@" + label] = flat.norm().item<double>();
    e["max@" + label] = flat.max().item<double>();
    e["abs-max@" + label] = flat.abs().max().item<double>();
    e["min@" + label] = flat.min().item<double>();
    e["mean@" + label] = flat.mean().item<double>();
    e["rms@" + label] = flat.pow(2).mean().sqrt().item<double>();
    e["nan-count@" + label] = flat.isnan().sum().item<double>();
    e["inf-count@" + label] = flat.isinf().sum().item<double>();
    e["mean-row-l2@" + label] = rows.mean().item<double>();
    e["mean-column-l2@" + label] = cols.mean().item<double>();
    if (c.distributions) e["entropy@" + label] = ent.mean().item<double>();
  };
  for (int layer = 0; layer < 2; ++layer) {
    const at::Tensor x = full_tensor(c, layer).to(at::kDouble);
    const std::int64_t k = c.shape.back();
    const at::Tensor m = x.reshape({-1, k});
    const at::Tensor rows = m.norm(2, {1});
    const at::Tensor cols = m.norm(2, {0});
    const at::Tensor ent = at::special_entr(m).sum(1) / std::log(static_cast<double>(k));
    put("decoder.layers." + std::to_string(layer), x.reshape({-1}), rows, cols, ent);
    all.push_back(x.reshape({-1}));
    rows_all.push_back(rows);
    cols_all.push_back(cols);
    ent_all.push_back(ent);
  }
  put("global", at::cat(all), at::cat(rows_all), at::cat(cols_all), at::cat(ent_all));
  return e;
}

bool close(double got, double want, double rel) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= rel * std::max(1.0, std::abs(want));
}

GroupOptions checked() {
  GroupOptions o;
  o.timeout = std::chrono::milliseconds(20000);
  o.communicator.check_collectives = true;
  return o;
}

struct CaseRun {
  testing::ThreadRun run;
  std::vector<RankResult> results;
};

// `fault`: a code-path fault switched on in every rank thread.
CaseRun run_case(const Case& c, const ParallelTopology& topo,
                 std::optional<CodePathFault> fault = std::nullopt) {
  CaseRun out;
  out.results.resize(topo.world_size());
  out.run = run_thread_ranks(
      topo, checked(),
      [&](int rank, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        std::optional<CodePathFaultScope> scope;
        if (fault) scope.emplace(*fault);
        out.results[rank] = run_rank(c, topo, rank, groups);
      });
  return out;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ShardedMetrics : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedMetrics, EqualTheMetricOfTheFullTensor) {
  const Case& c = GetParam();
  const ParallelTopology topo(2, 2, 2);
  CaseRun r = run_case(c, topo);
  ASSERT_EQ(r.run.report(), "");
  const auto want = expected(c);
  const double rel = c.dtype == at::kDouble ? 1e-10 : 1e-5;
  std::ostringstream bad;
  for (int rank = 0; rank < topo.world_size(); ++rank) {
    const RankResult& got = r.results[rank];
    for (const auto& [key, value] : got.values) {
      if (c.nonfinite && key.find("-count@") == std::string::npos) continue;
      auto it = want.find(key);
      if (it == want.end()) {
        bad << "rank " << rank << ": unexpected " << key << "\n";
        continue;
      }
      if (!close(value, it->second, rel))
        bad << "rank " << rank << ": " << key << " = " << value << ", full tensor gives "
            << it->second << "\n";
    }
    // 2 layers + global per metric.
    EXPECT_EQ(got.values.size(), metrics_for(c).size() * 3) << "rank " << rank;
    EXPECT_EQ(got.calls, got.stats.collectives) << "rank " << rank;
    EXPECT_LT(got.stats.collectives, got.stats.requests) << "rank " << rank << ": no batching";
  }
  EXPECT_EQ(bad.str(), "");
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Residuals without SP: replicated over TP; 7 tokens over CP -> [5, 2]; batch 5
  // over DP -> [4, 1], then two microbatches -> [3, 1] and [1, 0] (empty).
  v.push_back({"ResidualTpReplica", {7, 5, 6}, replica(), shard(0), shard(1), 2});
  // Residuals under SP: CP chunks [5, 2] split again over TP -> [4, 1] and [2, 0].
  v.push_back({"ResidualSpTpShard0", {7, 5, 6}, shard(0), shard(0), shard(1), 2});
  // Vocab-sharded logits (tp_shard_dim -1 normalized to 2): 6 -> [4, 2].
  v.push_back({"LogitsTpShardLast", {7, 5, 6}, shard(2), shard(0), shard(1), 2});
  // An empty vocab shard (2 -> [2, 0]) and uneven CP/DP.
  v.push_back({"EmptyVocabShard", {4, 3, 2}, shard(2), shard(0), shard(1), 1});
  v.push_back({"Fp32ResidualSp", {8, 4, 6}, shard(0), shard(0), shard(1), 2, at::kFloat});
  v.push_back({"Bf16Logits", {7, 5, 6}, shard(2), shard(0), shard(1), 2, at::kBFloat16});
  // Distributions over a vocab split 5 -> [4, 1]: normalized entropy.
  Case ent{"EntropyTpShardLast", {6, 4, 5}, shard(2), shard(0), shard(1), 2};
  ent.distributions = true;
  v.push_back(ent);
  Case ent_rep{"EntropyTpReplica", {6, 4, 5}, replica(), shard(0), shard(1), 2};
  ent_rep.distributions = true;
  v.push_back(ent_rep);
  // Owned: only tp rank 1 holds the value; tp rank 0 passes garbage.
  v.push_back({"OwnedOnTp", {7, 5, 6}, owned(1), shard(0), shard(1), 2});
  v.push_back({"OwnedOnDpTpShardLast", {7, 5, 6}, shard(2), replica(), owned(0), 1});
  // Parameter-style flat shards of a [5, 4] tensor: partial rows, then an
  // empty range together with an Owned axis.
  v.push_back({"FlatShardPartialRows", {5, 4}, flat({{0, 7}, {7, 20}}), replica(), replica(), 1});
  v.push_back({"FlatShardEmptyDpOwned", {5, 4}, flat({{0, 20}, {20, 20}}), replica(), owned(1), 1});
  Case nonfinite{"NanAndInfCounts", {7, 5, 6}, shard(0), shard(0), shard(1), 2};
  nonfinite.nonfinite = true;
  v.push_back(nonfinite);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Placements, ShardedMetrics, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Negative control: residuals sharded over TP (SP) but labelled Replica are not
// reduced over TP, so the value differs from the full tensor's.
TEST(ShardedMetricsControl, ReplicaWhereTheDataIsShardedGivesADifferentValue) {
  Case c{"WrongPlacement", {7, 5, 6}, shard(0), shard(0), shard(1), 2};
  c.tp.announced = Replica{};
  const ParallelTopology topo(2, 2, 2);
  CaseRun r = run_case(c, topo);
  ASSERT_EQ(r.run.report(), "");
  const auto want = expected(c);
  int differing = 0;
  for (const auto& got : r.results)
    if (!close(got.values.at("l2@global"), want.at("l2@global"), 1e-6)) ++differing;
  EXPECT_EQ(differing, topo.world_size());
}

// The code-path faults of the reduction path each change the statistics they
// name (on every rank) and leave the others exact. Uneven shards: the
// mean-of-means fault shows only where ranks hold unequal populations.
struct FaultCase {
  CodePathFault fault;
  Case layout;
  std::vector<std::string> wrong, exact;  // statistics at "global"
};

void PrintTo(const FaultCase& f, std::ostream* os) {
  *os << info(f.fault).name << " on " << f.layout.name;
}

class ShardedMetricsFaults : public ::testing::TestWithParam<FaultCase> {};

TEST_P(ShardedMetricsFaults, ChangeTheirStatisticsOnly) {
  const FaultCase& f = GetParam();
  const ParallelTopology topo(2, 2, 2);
  CaseRun r = run_case(f.layout, topo, f.fault);
  ASSERT_EQ(r.run.report(), "");
  const auto want = expected(f.layout);
  for (int rank = 0; rank < topo.world_size(); ++rank) {
    for (const std::string& stat : f.wrong) {
      const std::string key = stat + "@global";
      EXPECT_FALSE(close(r.results[rank].values.at(key), want.at(key), 1e-6))
          << info(f.fault).name << ": rank " << rank << " " << key << " is still exact";
    }
    for (const std::string& stat : f.exact) {
      const std::string key = stat + "@global";
      EXPECT_TRUE(close(r.results[rank].values.at(key), want.at(key), 1e-10))
          << info(f.fault).name << ": rank " << rank << " " << key << " changed";
    }
  }
}

std::vector<FaultCase> fault_cases() {
  const Case replicated{"ResidualTpReplica", {7, 5, 6}, replica(), shard(0), shard(1), 2};
  const Case sharded{"ResidualSpTpShard0", {7, 5, 6}, shard(0), shard(0), shard(1), 2};
  const Case vocab{"LogitsTpShardLast", {7, 5, 6}, shard(2), shard(0), shard(1), 2};
  return {
      {fault_replica_overcount, replicated, {"l2"}, {"max", "min", "mean", "rms"}},
      {fault_sqrt_before_sum, sharded, {"l2", "rms"}, {"max", "mean", "mean-row-l2"}},
      {fault_sqrt_before_sum, vocab, {"l2", "rms", "mean-row-l2"}, {"max", "mean"}},
      {fault_mean_of_means, sharded, {"mean", "rms", "mean-row-l2"}, {"l2", "max"}},
      {fault_cp_population_dropped, sharded, {"mean", "rms", "mean-row-l2"}, {"l2", "max"}},
      {fault_dp_population_dropped, sharded, {"mean", "rms", "mean-row-l2"}, {"l2", "max"}},
  };
}

INSTANTIATE_TEST_SUITE_P(CodePathFaults, ShardedMetricsFaults, ::testing::ValuesIn(fault_cases()),
                         [](const auto& i) {
                           std::string n(parity::info(i.param.fault).name);
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n + "_" + i.param.layout.name;
                         });

// Two metrics whose requests are identical (same axis, op, dtype, shape) share
// every collective: the second metric doubles the requests, not the calls.
TEST(ShardedMetricsBatching, IdenticalRequestsShareOneCollective) {
  const ParallelTopology topo(2, 2, 2);
  struct Counts {
    ExecutorStats one, two;
    std::int64_t calls_one = 0, calls_two = 0;
    double a = 0, b = 0;
  };
  std::vector<Counts> counts(topo.world_size());
  auto run = run_thread_ranks(
      topo, checked(),
      [&](int rank, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        const RankCoordinates co = topo.coordinates(rank);
        const at::Tensor local = at::full({3, 2, 4}, 1.0 + rank, at::kDouble);
        const AxisPlacements p = placements_for_forward_observation(0, 0, 1, 3, 2, 2, 2);
        (void)co;
        auto l2 = [](const char* name, SourceKind k) {
          return make_logical_metric(LogicalStatistic::l2, name, KindSet{k}, LabelScope::layer);
        };
        auto calls = [&] {
          return groups.tp->calls_issued() + groups.cp->calls_issued() + groups.dp->calls_issued();
        };
        for (int variant = 0; variant < 2; ++variant) {
          std::vector<std::shared_ptr<const Metric>> metrics = {
              l2("a", SourceKind::residual_accumulator)};
          if (variant == 1) metrics.push_back(l2("b", SourceKind::residual_contribution));
          MetricCollector collector(metrics, topo, rank);
          for (int layer = 0; layer < 3; ++layer)
            for (SourceKind k :
                 {SourceKind::residual_accumulator, SourceKind::residual_contribution})
              collector.observe_placed({"decoder.layers." + std::to_string(layer), "x", k}, local,
                                       p, 1, {0, 0, GraphPhase::eager});
          MetricExecutor executor(groups);
          const std::int64_t before = calls();
          const auto results = collector.commit(executor);
          (variant ? counts[rank].two : counts[rank].one) = executor.stats();
          (variant ? counts[rank].calls_two : counts[rank].calls_one) = calls() - before;
          if (variant == 1) {
            counts[rank].a = results[3].value;  // a@global
            counts[rank].b = results.back().value;
          }
        }
      });
  ASSERT_EQ(run.report(), "");
  for (const auto& c : counts) {
    // 4 labels (3 layers + global) x 3 axes, one collective per axis.
    EXPECT_EQ(c.one.requests, 12);
    EXPECT_EQ(c.one.collectives, 3);
    EXPECT_EQ(c.two.requests, 24);
    EXPECT_EQ(c.two.collectives, 3);
    EXPECT_EQ(c.calls_one, 3);
    EXPECT_EQ(c.calls_two, 3);
    EXPECT_EQ(c.a, c.b);  // same data, same value
  }
}

// All-gather requests batch too: stacked on a new leading dim, gathered along
// dim + 1, unbound. Two programs gather [2, 1] pieces along dim 0 in one call.
TEST(ShardedMetricsBatching, AllGatherRequestsAreStackedGatheredAndUnbound) {
  const ParallelTopology topo(2, 1, 1);
  std::vector<std::vector<double>> gathered(2);
  std::vector<ExecutorStats> stats(2);
  auto run = run_thread_ranks(
      topo, checked(),
      [&](int rank, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        std::vector<MetricProgram> programs;
        for (int p = 0; p < 2; ++p) {
          const at::Tensor piece =
              at::tensor({10.0 * p + rank, 100.0 * p + rank}, at::kDouble).reshape({2, 1});
          programs.push_back({"gather" + std::to_string(p), "global",
                              MetricStep::collect(
                                  {{piece, Axis::tp, CollectiveKind::all_gather, ReduceOp::sum, 0}},
                                  [&, rank, p](std::vector<at::Tensor> done) {
                                    const at::Tensor g = done.at(0);  // [4, 1]
                                    if (rank == 0 && g.size(0) == 4)
                                      for (int i = 0; i < 4; ++i)
                                        gathered[p].push_back(g[i][0].item<double>());
                                    return MetricStep::finished(g.sum());
                                  })});
        }
        MetricExecutor executor(groups);
        executor.run(std::move(programs));
        stats[rank] = executor.stats();
      });
  ASSERT_EQ(run.report(), "");
  EXPECT_EQ(gathered[0], (std::vector<double>{0, 0, 1, 1}));
  EXPECT_EQ(gathered[1], (std::vector<double>{10, 100, 11, 101}));
  EXPECT_EQ(stats[0].requests, 2);
  EXPECT_EQ(stats[0].collectives, 1);
}

// A rank that observed an extra layer issues a different request sequence;
// with check_collectives on every rank reports a mismatch instead of hanging.
TEST(ShardedMetricsSymmetry, AsymmetricRequestsAreReportedNotHung) {
  const ParallelTopology topo(2, 1, 1);
  GroupOptions o = checked();
  o.timeout = std::chrono::milliseconds(10000);
  auto run = run_thread_ranks(
      topo, o,
      [&](int rank, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        MetricCollector collector(
            {make_logical_metric(LogicalStatistic::l2, "l2",
                                 KindSet{SourceKind::residual_accumulator}, LabelScope::layer)},
            topo, rank);
        const AxisPlacements p = placements_for_forward_observation(0, 0, 1, 3, 2, 1, 1);
        const int layers = rank == 0 ? 2 : 1;
        for (int layer = 0; layer < layers; ++layer)
          collector.observe_placed({"decoder.layers." + std::to_string(layer),
                                    "residual_accumulator", SourceKind::residual_accumulator},
                                   at::ones({2, 1, 3}), p, 1, {0, 0, GraphPhase::eager});
        MetricExecutor executor(groups);
        collector.commit(executor);
      });
  // Reported, not hung: a hang would end in the 10 s group timeout
  // (CollectiveTimeout), so the error kind is the real assertion, not the time.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(run.outcomes[rank].error_kind, "CollectiveMismatch") << run.report();
    EXPECT_NE(run.outcomes[rank].error.find("collective mismatch on tp group"), std::string::npos)
        << run.outcomes[rank].error;
  }
}

}  // namespace
}  // namespace parity
