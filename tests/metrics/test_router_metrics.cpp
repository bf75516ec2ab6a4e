// The four router diagnostics metrics: hand-computed statistics of two
// sequences (a third without valid tokens must not count), the cross-layer
// labels (global, worst-layer), the balanced baseline, placements they reject,
// and a DP-sharded run (tp2 x dp2 thread ranks over Gloo, uneven and empty
// microbatches) equal to the single-rank run over the same global batch. Rank
// threads only compute and record; assertions run after join (pitfalls.md).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <sstream>

#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/metric_names.h"
#include "harness/metrics/statistics/router_metrics.h"
#include "harness/model/router_diagnostics.h"
#include "harness/observation/router_diagnostic_channels.h"
#include "tests/support/named_owner.h"
#include "tests/support/rank_threads.h"

namespace parity {
namespace {

using C = RouterDiagnosticChannel;

const char* const kRouterMetrics[] = {"layer-router-health", "layer-router-seq-aux-decomposition",
                                      "layer-router-routing-balance", "layer-router-expert-bias"};

using Owner = testing::NamedOwner;

std::vector<std::shared_ptr<const Metric>> router_metrics() {
  std::vector<std::string> names(std::begin(kRouterMetrics), std::end(kRouterMetrics));
  return make_metrics(parse_metric_names(names));
}

// One sequence's channels, E = 2.
struct Sequence {
  std::vector<double> score, aux, actual, bias;
  double overlap, tokens, margin;
};

at::Tensor diagnostics_of(const std::vector<Sequence>& seqs) {
  at::Tensor d = at::zeros(
      {static_cast<std::int64_t>(seqs.size()), kRouterDiagnosticChannelCount, 2}, at::kFloat);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    auto put = [&](C c, const std::vector<double>& v) {
      d[i][channel_index(c)].copy_(at::tensor(v, at::kDouble));
    };
    put(C::mean_score, s.score);
    put(C::aux_load, s.aux);
    put(C::actual_load, s.actual);
    put(C::expert_bias, s.bias);
    d[i][channel_index(C::aux_actual_overlap)][0] = s.overlap;
    d[i][channel_index(C::valid_token_count)][0] = s.tokens;
    d[i][channel_index(C::topk_boundary_relative_margin)][0] = s.margin;
  }
  return d;
}

// Two routed sequences of 8 tokens and one without valid tokens (all zeros:
// counted, it would move every mean).
at::Tensor skewed_layer() {
  return diagnostics_of({{{0.75, 0.25}, {1, 0}, {0.5, 0.5}, {0.1, -0.1}, 0.5, 8, 0.25},
                         {{0.5, 0.5}, {0.5, 0.5}, {0, 1}, {0.1, -0.1}, 1, 8, 0.4},
                         {{0, 0}, {0, 0}, {0, 0}, {0, 0}, 0, 0, 0}});
}
at::Tensor balanced_layer() {
  return diagnostics_of({{{0.5, 0.5}, {0.5, 0.5}, {0.5, 0.5}, {0, 0}, 1, 4, 0.1},
                         {{0.5, 0.5}, {0.5, 0.5}, {0.5, 0.5}, {0, 0}, 1, 4, 0.1}});
}

// Single rank, one microbatch per layer: "metric@label" -> value.
std::map<std::string, double> single_rank(const std::vector<at::Tensor>& layers) {
  MetricCollector collector(router_metrics(), ParallelTopology(1, 1, 1), 0);
  for (std::size_t l = 0; l < layers.size(); ++l)
    collector.observe(Owner("decoder.layers." + std::to_string(l) + ".mlp.router"),
                      "router_diagnostics", SourceKind::router_diagnostics, layers[l], std::nullopt,
                      std::nullopt, 0, {0, 0, GraphPhase::eager});
  std::map<std::string, double> out;
  testing::ThreadRun run = testing::run_thread_ranks(
      ParallelTopology(1, 1, 1), GroupOptions{},
      [&](int, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        MetricExecutor executor(groups);
        for (const MetricResult& r : collector.commit(executor))
          out[r.metric + "@" + r.label] = r.value;
      });
  EXPECT_EQ(run.report(), "");
  return out;
}

void expect_values(const std::map<std::string, double>& got,
                   const std::map<std::string, double>& want) {
  for (const auto& [key, value] : want) {
    auto it = got.find(key);
    if (it == got.end()) {
      ADD_FAILURE() << key << " missing";
      continue;
    }
    EXPECT_NEAR(it->second, value, 1e-7) << key;
  }
}

TEST(RouterMetrics, PerSequenceStatisticsOfALayer) {
  const auto got = single_rank({skewed_layer()});
  const std::string d = "layer-router-seq-aux-decomposition@decoder.layers.0/";
  const std::string r = "layer-router-routing-balance@decoder.layers.0/";
  const std::string b = "layer-router-expert-bias@decoder.layers.0/";
  // u = 1/2. Sequence 0: aux - u = (0.5, -0.5), score - u = (0.25, -0.25);
  // sequence 1: both zero. Sequence 2 has no valid token and is left out.
  expect_values(got, {
                         {d + "loss-mean", (1.5 + 1.0) / 2},  // 2 * (1 * 0.75), 2 * 0.5
                         {d + "loss-max", 1.5},
                         {d + "assignment-imbalance-mean", (1.0 + 0) / 2},
                         {d + "score-imbalance-mean", (0.25 + 0) / 2},
                         {d + "imbalance-coupling-mean", (0.5 + 0) / 2},
                         {d + "imbalance-alignment-mean", (1.0 + 0) / 2},  // degenerate: 0
                         {r + "actual-imbalance-mean", (0 + 1.0) / 2},
                         {r + "actual-imbalance-max", 1.0},
                         {r + "aux-actual-tv-mean", 0.5},
                         {r + "topk-overlap-mean", 0.75},
                         {r + "topk-overlap-min", 0.5},
                         {r + "aux-max-over-mean", (2.0 + 1.0) / 2},
                         {r + "actual-max-over-mean", (1.0 + 2.0) / 2},
                         {r + "actual-inactive-fraction", (0 + 0.5) / 2},
                         // Token-weighted (8, 8): score (0.625, 0.375), aux (0.75,
                         // 0.25), actual (0.25, 0.75).
                         {r + "global-actual-imbalance", 2 * (0.25 * 0.25 * 2)},
                         {r + "global-aux-actual-tv", 0.5},
                         {r + "global-aux-max-over-mean", 1.5},
                         {r + "global-actual-max-over-mean", 1.5},
                         {b + "mean", 0},
                         {b + "std", 0.1},
                         {b + "rms", 0.1},
                         {b + "range", 0.2},
                         {b + "abs-max", 0.1},
                         {b + "score-correlation", (1.0 + 0) / 2},  // constant score: 0
                         {b + "aux-load-correlation", (1.0 + 0) / 2},
                         {b + "actual-load-correlation", (0 - 1.0) / 2},
                     });
  const std::string h = "layer-router-health@";
  expect_values(got, {{h + "global/seq-loss", 1.25},
                      {h + "global/global-batch-loss", 2 * (0.75 * 0.625 + 0.25 * 0.375)},
                      {h + "global/seq-global-loss-gap", 1.25 - 1.125},
                      {h + "global/topk-boundary-relative-margin", (0.25 + 0.4) / 2}});
  // Health is the compact bundle: no per-layer labels.
  EXPECT_EQ(got.count(h + "decoder.layers.0/seq-loss"), 0u);
}

TEST(RouterMetrics, GlobalAndWorstLayerAcrossLayers) {
  const auto got = single_rank({skewed_layer(), balanced_layer()});
  const std::string h = "layer-router-health@";
  const std::string d = "layer-router-seq-aux-decomposition@";
  expect_values(got, {
                         // Every layer's valid sequences together: (1.5 + 1 + 1 + 1) / 4.
                         {h + "global/seq-loss", 1.125},
                         {h + "worst-layer/seq-loss", 1.25},
                         // Batch-level values: the mean over layers, the largest.
                         {h + "global/global-batch-loss", (1.125 + 1.0) / 2},
                         {h + "worst-layer/global-batch-loss", 1.125},
                         // The margin's worst layer is its smallest.
                         {h + "global/topk-boundary-relative-margin", (0.25 + 0.4 + 0.1 + 0.1) / 4},
                         {h + "worst-layer/topk-boundary-relative-margin", 0.1},
                         {d + "decoder.layers.1/loss-mean", 1.0},
                         {d + "global/loss-max", 1.5},
                     });
  EXPECT_EQ(got.count(d + "worst-layer/loss-mean"), 0u);
  // Every label is "<layer, global or worst-layer>/<operation>": the program's
  // own label never reaches a result.
  for (const auto& [key, value] : got) EXPECT_NE(key.find('/'), std::string::npos) << key;
}

TEST(RouterMetrics, BalancedRoutingGivesTheBaselines) {
  // s = 4, b = 2, E = 4: uniform scores, token si of each sequence routed to
  // expert si and dispatched as selected.
  const at::Tensor scores = at::full({8, 4}, 0.25, at::kFloat);
  const at::Tensor map = at::eye(4).to(at::kBool).repeat_interleave(2, 0);
  const at::Tensor d = build_router_diagnostics(scores, map, map, at::Tensor(), 4, 2, {});
  const auto got = single_rank({d});
  for (const auto& [key, value] : got) {
    const bool one = key.find("loss") != std::string::npos && key.find("gap") == std::string::npos;
    const bool max_over_mean = key.find("max-over-mean") != std::string::npos;
    const bool zero = key.find("imbalance") != std::string::npos ||
                      key.find("gap") != std::string::npos || key.find("-tv") != std::string::npos;
    if (one || max_over_mean) {
      EXPECT_NEAR(value, 1.0, 1e-12) << key;
    } else if (zero) {
      EXPECT_NEAR(value, 0.0, 1e-12) << key;
    }
  }
  EXPECT_NEAR(got.at("layer-router-health@global/seq-loss"), 1.0, 1e-12);
  EXPECT_NEAR(got.at("layer-router-routing-balance@global/topk-overlap-mean"), 1.0, 1e-12);
}

TEST(RouterMetrics, RejectSequencesSplitOverTpOrCp) {
  MetricCollector collector(router_metrics(), ParallelTopology(2, 1, 1), 0);
  AxisPlacements p;
  p.at(Axis::tp) = Shard{0};
  try {
    collector.observe_placed(
        {"decoder.layers.0.mlp.router", "router_diagnostics", SourceKind::router_diagnostics},
        skewed_layer(), p, 0, {0, 0, GraphPhase::eager});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("decoder.layers.0.mlp.router.router_diagnostics"), std::string::npos) << m;
    EXPECT_NE(m.find("tp=Shard(0)"), std::string::npos) << m;
  }
}

// --------------------------------------------------------------- DP-sharded

// Two layers of a global batch of 7 sequences (s = 5, E = 4, top-2), from
// random scores and routing with padding; sequence 3 is padding only.
std::vector<at::Tensor> random_layers() {
  std::vector<at::Tensor> layers;
  const std::int64_t s = 5, b = 7, e = 4;
  for (int layer = 0; layer < 2; ++layer) {
    auto gen = at::detail::createCPUGenerator(77 + layer);
    const at::Tensor scores = at::softmax(at::randn({s * b, e}, gen, at::kDouble) * 2, -1);
    const at::Tensor aux =
        at::zeros({s * b, e}, at::kBool).scatter_(1, std::get<1>(scores.topk(2)), true);
    const at::Tensor bias = at::randn({e}, gen, at::kDouble) * 0.1;
    at::Tensor actual =
        at::zeros({s * b, e}, at::kBool).scatter_(1, std::get<1>((scores + bias).topk(2)), true);
    actual = actual.logical_and(at::rand({s * b, e}, gen, at::kDouble) > 0.2);  // dropping
    at::Tensor padding = at::rand({s * b}, gen, at::kDouble) < 0.3;
    padding.view({s, b}).select(1, 3).fill_(true);
    layers.push_back(build_router_diagnostics(scores, aux, actual, bias, s, b, padding));
  }
  return layers;
}

// n over k parts, uneven: the first takes the rest (5 over 2 -> [4, 1], 2 over
// 2 -> [2, 0]: an empty part).
at::Tensor part(const at::Tensor& t, int index, int parts) {
  const std::int64_t n = t.size(0), small = n / (parts + 1);
  const std::int64_t first = n - small * (parts - 1);
  const std::int64_t offset = index == 0 ? 0 : first + small * (index - 1);
  return t.narrow(0, offset, index == 0 ? first : small);
}

// Every rank's results ("metric@label" -> value) of `topology`, each rank
// observing its DP part of every layer in `microbatches` microbatches.
std::vector<std::map<std::string, double>> run_sharded(const ParallelTopology& topology,
                                                       int microbatches) {
  const std::vector<at::Tensor> layers = random_layers();
  std::vector<std::map<std::string, double>> out(topology.world_size());
  GroupOptions options;
  options.timeout = std::chrono::seconds(20);
  options.communicator.check_collectives = true;
  testing::ThreadRun run = testing::run_thread_ranks(
      topology, options,
      [&](int rank, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        const RankCoordinates co = topology.coordinates(rank);
        MetricCollector collector(router_metrics(), topology, rank);
        for (std::size_t l = 0; l < layers.size(); ++l) {
          const at::Tensor mine = part(layers[l], co.dp, topology.dp());
          for (int mb = 0; mb < microbatches; ++mb)
            collector.observe(Owner("decoder.layers." + std::to_string(l) + ".mlp.router"),
                              "router_diagnostics", SourceKind::router_diagnostics,
                              part(mine, mb, microbatches), std::nullopt, std::nullopt, 0,
                              {0, mb, GraphPhase::eager});
        }
        MetricExecutor executor(groups);
        for (const MetricResult& r : collector.commit(executor))
          out[rank][r.metric + "@" + r.label] = r.value;
      });
  EXPECT_EQ(run.report(), "");
  return out;
}

TEST(RouterMetrics, DpShardedRunEqualsTheSingleRankRun) {
  const auto single = run_sharded(ParallelTopology(1, 1, 1), 3);  // [5, 1, 1]
  // tp2 x dp2: tp replicas must count once; dp parts [5, 2], microbatches
  // [4, 1] and [2, 0] (empty).
  const auto sharded = run_sharded(ParallelTopology(2, 1, 2), 2);
  ASSERT_EQ(single.size(), 1u);
  const auto& want = single[0];
  // 2 layers: health 9 ops x (global, worst-layer); the others 6, 12, 8 ops x
  // (2 layers + global).
  EXPECT_EQ(want.size(), 9u * 2 + (6u + 12u + 8u) * 3);
  std::ostringstream bad;
  for (std::size_t rank = 0; rank < sharded.size(); ++rank) {
    if (sharded[rank].size() != want.size())
      bad << "rank " << rank << ": " << sharded[rank].size() << " results\n";
    for (const auto& [key, value] : want) {
      auto it = sharded[rank].find(key);
      if (it == sharded[rank].end()) {
        bad << "rank " << rank << ": " << key << " missing\n";
        continue;
      }
      if (std::isnan(value) ||
          std::abs(it->second - value) > 1e-12 * std::max(1.0, std::abs(value)))
        bad << "rank " << rank << ": " << key << " = " << it->second << ", single rank " << value
            << "\n";
      if (it->second != sharded[0].at(key)) bad << "rank " << rank << " differs from rank 0\n";
    }
  }
  EXPECT_EQ(bad.str(), "");
  // Not trivially equal: the layers differ and the statistics move.
  EXPECT_NE(want.at("layer-router-seq-aux-decomposition@decoder.layers.0/loss-mean"),
            want.at("layer-router-seq-aux-decomposition@decoder.layers.1/loss-mean"));
}

// Negative control: sharded sequences observed as Replica on dp are reported
// from one rank's part only, and the values differ.
TEST(RouterMetrics, DpShardedWithoutItsPlacementDiffers) {
  const std::vector<at::Tensor> layers = random_layers();
  const ParallelTopology topology(1, 1, 2);
  std::vector<std::map<std::string, double>> out(2);
  testing::ThreadRun run = testing::run_thread_ranks(
      topology, GroupOptions{},
      [&](int rank, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        MetricCollector collector(router_metrics(), topology, rank);
        for (std::size_t l = 0; l < layers.size(); ++l)
          collector.observe_placed({"decoder.layers." + std::to_string(l) + ".mlp.router",
                                    "router_diagnostics", SourceKind::router_diagnostics},
                                   part(layers[l], rank, 2), AxisPlacements{}, 0,
                                   {0, 0, GraphPhase::eager});
        MetricExecutor executor(groups);
        for (const MetricResult& r : collector.commit(executor))
          out[rank][r.metric + "@" + r.label] = r.value;
      });
  ASSERT_EQ(run.report(), "");
  const auto single = run_sharded(ParallelTopology(1, 1, 1), 1);
  const std::string key = "layer-router-health@global/seq-loss";
  EXPECT_GT(std::abs(out[0].at(key) - single[0].at(key)), 1e-6);
}

}  // namespace
}  // namespace parity
