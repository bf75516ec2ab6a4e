// Metric framework without a network: placements and the forward rule, layer
// labels, names, the step filter, prepare's storage rule, single-rank results
// (size-1 axes issue no call), microbatches as a concatenation.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <map>

#include "harness/backend/backend.h"
#include "harness/backend/tensor_statistics.h"
#include "harness/faults/code_path_faults.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "harness/metrics/metric_names.h"
#include "harness/metrics/placement.h"
#include "harness/metrics/statistics/dimwise_metrics.h"
#include "harness/metrics/statistics/logical_metrics.h"
#include "harness/parallel/communicator.h"
#include "harness/parallel/process_groups.h"
#include "tests/support/named_owner.h"

PARITY_USES_FAULT(prepare_aliases_buffer);
PARITY_USES_FAULT(sp_residual_mislabel);

namespace parity {
namespace {

using Owner = testing::NamedOwner;

RankGroups single_rank_groups() {
  RankGroups g;
  g.tp = std::make_unique<Communicator>(Axis::tp, std::vector<int>{0}, 0, nullptr, nullptr,
                                        CommunicatorOptions{});
  g.cp = std::make_unique<Communicator>(Axis::cp, std::vector<int>{0}, 0, nullptr, nullptr,
                                        CommunicatorOptions{});
  g.dp = std::make_unique<Communicator>(Axis::dp, std::vector<int>{0}, 0, nullptr, nullptr,
                                        CommunicatorOptions{});
  g.world = std::make_unique<Communicator>(Axis::world, std::vector<int>{0}, 0, nullptr, nullptr,
                                           CommunicatorOptions{});
  return g;
}

std::vector<std::shared_ptr<const Metric>> every_statistic(SourceKind kind, LabelScope scope) {
  std::vector<std::shared_ptr<const Metric>> m;
  const KindSet k{kind};
  const std::pair<const char*, LogicalStatistic> logical[] = {
      {"l2", LogicalStatistic::l2},
      {"max", LogicalStatistic::max},
      {"abs-max", LogicalStatistic::abs_max},
      {"min", LogicalStatistic::min},
      {"mean", LogicalStatistic::mean},
      {"rms", LogicalStatistic::rms},
      {"nan-count", LogicalStatistic::nan_count},
      {"inf-count", LogicalStatistic::inf_count}};
  for (const auto& [name, st] : logical) m.push_back(make_logical_metric(st, name, k, scope));
  m.push_back(make_dimwise_metric(DimwiseStatistic::mean_row_l2, "mean-row-l2", k, scope));
  m.push_back(make_dimwise_metric(DimwiseStatistic::mean_column_l2, "mean-column-l2", k, scope));
  m.push_back(make_dimwise_metric(DimwiseStatistic::entropy, "entropy", k, scope));
  return m;
}

std::map<std::string, double> by_key(const std::vector<MetricResult>& results) {
  std::map<std::string, double> m;
  for (const auto& r : results) m[r.metric + "@" + r.label] = r.value;
  return m;
}

// ---------------------------------------------------------------- placements
TEST(Placements, ForwardRuleFollowsContractSection4) {
  auto p = placements_for_forward_observation(0, 0, 1, 3, 2, 2, 2);
  EXPECT_EQ(p.describe(), "tp=Shard(0), cp=Shard(0), dp=Shard(1)");
  p = placements_for_forward_observation(std::nullopt, 0, 1, 3, 2, 2, 2);
  EXPECT_EQ(p.describe(), "tp=Replica, cp=Shard(0), dp=Shard(1)");
  p = placements_for_forward_observation(-1, 0, 1, 3, 2, 1, 1);  // vocab-sharded logits
  EXPECT_EQ(p.describe(), "tp=Shard(2), cp=Replica, dp=Replica");
  p = placements_for_forward_observation(0, 0, 1, 3, 1, 1, 1);  // tp size 1: Replica
  EXPECT_EQ(p.describe(), "tp=Replica, cp=Replica, dp=Replica");
  p = placements_for_forward_observation(std::nullopt, std::nullopt, std::nullopt, 3, 2, 2, 2);
  EXPECT_EQ(p.describe(), "tp=Replica, cp=Shard(?), dp=Shard(?)");
  p = placements_for_forward_observation(0, -3, -2, 3, 2, 2, 2);
  EXPECT_EQ(p.describe(), "tp=Shard(0), cp=Shard(0), dp=Shard(1)");
  EXPECT_THROW(placements_for_forward_observation(3, 0, 1, 3, 2, 1, 1), std::invalid_argument);
  EXPECT_THROW(placements_for_forward_observation(0, 0, -4, 3, 1, 1, 2), std::invalid_argument);
}

TEST(Placements, FlatShardValidation) {
  EXPECT_NO_THROW(make_flat_shard({4, 6}, 0, 24));
  EXPECT_NO_THROW(make_flat_shard({4, 6}, 5, 5));
  EXPECT_THROW(make_flat_shard({4, 6}, -1, 3), std::invalid_argument);
  EXPECT_THROW(make_flat_shard({4, 6}, 4, 3), std::invalid_argument);
  EXPECT_THROW(make_flat_shard({4, 6}, 0, 25), std::invalid_argument);
  EXPECT_EQ(to_string(Placement{make_flat_shard({4, 6}, 3, 9)}), "FlatShard([4, 6], 3:9)");
  AxisPlacements two;
  two.at(Axis::tp) = make_flat_shard({4}, 0, 2);
  two.at(Axis::dp) = make_flat_shard({4}, 2, 4);
  EXPECT_THROW(two.validate(), std::invalid_argument);
}

// Records the placements the collector decided for each observation.
class PlacementRecorder final : public Metric {
 public:
  explicit PlacementRecorder(std::vector<std::string>* seen)
      : Metric("placements",
               KindSet{SourceKind::residual_accumulator, SourceKind::residual_contribution,
                       SourceKind::attention_context},
               LabelScope::layer),
        seen_(seen) {}
  Prepared prepare(const MetricInput& input) const override {
    seen_->push_back(input.placements.describe());
    Prepared p;
    p.value = at::zeros({1}, at::kDouble);
    return p;
  }
  Prepared merge(std::vector<Prepared> m) const override { return m.front(); }
  MetricStep start(std::vector<Prepared>) const override {
    return MetricStep::finished(at::zeros({}, at::kDouble));
  }

 private:
  std::vector<std::string>* seen_;
};

// The code-path fault sp-residual-mislabel: under SP (tp_shard_dim 0) the
// residual kinds are labelled Replica on tp; other kinds keep their shard.
TEST(Placements, SpResidualMislabelFaultLabelsSpResidualsReplica) {
  auto observe_all = [](std::vector<std::string>& seen) {
    MetricCollector c({std::make_shared<PlacementRecorder>(&seen)}, ParallelTopology(2, 1, 1), 0);
    Owner layer("decoder.layers.0");
    const at::Tensor x = at::rand({4, 2, 8}, at::kDouble);
    const ExecutionPoint point{0, 0, GraphPhase::eager};
    c.observe(layer, "residual_accumulator", SourceKind::residual_accumulator, x, 0, 0, 1, point);
    c.observe(layer, "residual_contribution", SourceKind::residual_contribution, x, 0, 0, 1, point);
    c.observe(layer, "attention_context", SourceKind::attention_context, x, 2, 0, 1, point);
  };
  std::vector<std::string> correct, faulty;
  observe_all(correct);
  EXPECT_EQ(correct, (std::vector<std::string>{"tp=Shard(0), cp=Replica, dp=Replica",
                                               "tp=Shard(0), cp=Replica, dp=Replica",
                                               "tp=Shard(2), cp=Replica, dp=Replica"}));
  {
    CodePathFaultScope fault(fault_sp_residual_mislabel);
    observe_all(faulty);
  }
  EXPECT_EQ(faulty, (std::vector<std::string>{"tp=Replica, cp=Replica, dp=Replica",
                                              "tp=Replica, cp=Replica, dp=Replica",
                                              "tp=Shard(2), cp=Replica, dp=Replica"}));
}

TEST(Placements, PlaceholderWhenAnotherRankOwns) {
  AxisPlacements p;
  p.at(Axis::dp) = Owned{1};
  EXPECT_TRUE(is_placeholder(p, RankCoordinates{0, 0, 0}));
  EXPECT_FALSE(is_placeholder(p, RankCoordinates{1, 1, 1}));
}

// ---------------------------------------------------------------- labels, names, steps
TEST(MetricLabels, InnermostLayersPrefixGreedy) {
  EXPECT_EQ(layer_label("decoder.layers.3.residual_accumulator"), "decoder.layers.3");
  EXPECT_EQ(layer_label("decoder.layers.3.mlp.mlp_output"), "decoder.layers.3");
  EXPECT_EQ(layer_label("decoder.layers.3.mlp.experts.layers.1.fc"),
            "decoder.layers.3.mlp.experts.layers.1");
  EXPECT_EQ(layer_label("layers.0.x"), "layers.0");
  EXPECT_EQ(layer_label("output_layer.output_logits"), "");
  EXPECT_EQ(layer_label("decoder.layers.x.y"), "");
  EXPECT_EQ(layer_label("decoder.mylayers.2.y"), "");
  EXPECT_EQ(layer_label("decoder.layers."), "");  // an empty part is no layer number
  EXPECT_EQ(layer_label("decoder.layers..mlp"), "");
}

TEST(MetricNames, ParseKnownRejectUnknownAndDuplicates) {
  auto specs = parse_metric_names("layer-residual-contribution-l2, global-output-logits-l2");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].kind, SourceKind::residual_contribution);
  EXPECT_EQ(specs[0].scope, LabelScope::layer);
  EXPECT_EQ(specs[1].scope, LabelScope::global);
  try {
    parse_metric_names("layer-residual-l2");
    FAIL() << "unknown name accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown metric 'layer-residual-l2'"), std::string::npos) << m;
    EXPECT_NE(m.find("(parity list metrics lists the "), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
  }
  EXPECT_THROW(parse_metric_names("global-output-logits-l2,global-output-logits-l2"),
               std::invalid_argument);
  EXPECT_THROW(parse_metric_names(""), std::invalid_argument);
  EXPECT_THROW(parse_metric_names("global-output-logits-l2,"), std::invalid_argument);
}

TEST(MetricNames, EveryNameBuildsAMetricOfItsKind) {
  const std::vector<std::string> expected = {"layer-residual-accumulator-l2",
                                             "layer-residual-contribution-l2",
                                             "layer-residual-contribution-max",
                                             "layer-attention-context-mean-row-l2",
                                             "layer-mlp-output-rms",
                                             "global-output-logits-l2",
                                             "global-output-logits-nan-count",
                                             "layer-router-decision-entropy"};
  const auto names = known_metric_names();
  for (const auto& e : expected)
    EXPECT_NE(std::find(names.begin(), names.end(), e), names.end()) << e;
  int parameter_metrics = 0;
  for (const auto& spec : known_metrics()) {
    if (spec.source == MetricSource::parameters) {
      // The optimizer's norms: the driver computes them; no collector metric.
      ++parameter_metrics;
      EXPECT_THROW(make_metric(spec), std::invalid_argument) << spec.name;
      EXPECT_TRUE(make_metrics({spec}).empty()) << spec.name;
      continue;
    }
    auto m = make_metric(spec);
    EXPECT_EQ(m->name(), spec.name);
    EXPECT_TRUE(m->accepts(spec.kind)) << spec.name;
  }
  EXPECT_EQ(parameter_metrics, 3);  // global-wgrad-l2, global-param-l2, layer-param-l2
}

TEST(MetricSteps, OnlyStepPhasesCount) {
  EXPECT_TRUE(counts_for_step({0, 0, GraphPhase::eager}));
  EXPECT_TRUE(counts_for_step({0, 1, GraphPhase::record}));
  EXPECT_TRUE(counts_for_step({3, 0, GraphPhase::replay}));
  EXPECT_FALSE(counts_for_step({0, 0, GraphPhase::warmup}));
  EXPECT_FALSE(counts_for_step({0, 0, GraphPhase::capture}));
  EXPECT_FALSE(counts_for_step({-1, 0, GraphPhase::eager}));
}

TEST(MetricCollector, CallbackReadsTheExecutionPointAndIgnoresWarmupAndCapture) {
  MetricCollector c(every_statistic(SourceKind::residual_accumulator, LabelScope::layer),
                    ParallelTopology(1, 1, 1), 0);
  Owner layer("decoder.layers.0");
  const at::Tensor x = at::arange(6, at::kDouble).reshape({3, 1, 2}) + 1;
  {
    auto scope = capture_tensor_observations(c.callback(), c.kinds());
    {
      ExecutionPointScope warm({-1, 0, GraphPhase::warmup});
      observe_tensor(layer, "residual_accumulator", SourceKind::residual_accumulator, x * 100, 0, 0,
                     1);
    }
    {
      ExecutionPointScope capture({0, 0, GraphPhase::capture});
      observe_tensor(layer, "residual_accumulator", SourceKind::residual_accumulator, x * 100, 0, 0,
                     1);
    }
    ExecutionPointScope step({0, 0, GraphPhase::eager});
    observe_tensor(layer, "residual_accumulator", SourceKind::residual_accumulator, x, 0, 0, 1);
  }
  EXPECT_EQ(c.counted(), 1);
  EXPECT_EQ(c.ignored(), 2);
  RankGroups g = single_rank_groups();
  MetricExecutor ex(g);
  auto r = by_key(c.commit(ex));
  EXPECT_DOUBLE_EQ(r["l2@decoder.layers.0"], std::sqrt(91.0));
  EXPECT_DOUBLE_EQ(r["max@global"], 6.0);
}

TEST(MetricCollector, TwoStepsWithoutCommitAreAnError) {
  MetricCollector c(every_statistic(SourceKind::residual_accumulator, LabelScope::layer),
                    ParallelTopology(1, 1, 1), 0);
  Owner layer("decoder.layers.0");
  const at::Tensor x = at::ones({2, 1, 3});
  c.observe(layer, "residual_accumulator", SourceKind::residual_accumulator, x, 0, 0, 1,
            {0, 0, GraphPhase::eager});
  EXPECT_THROW(c.observe(layer, "residual_accumulator", SourceKind::residual_accumulator, x, 0, 0,
                         1, {1, 0, GraphPhase::eager}),
               std::logic_error);
}

// ---------------------------------------------------------------- prepare
TEST(MetricPrepare, PreparedStateNeverSharesStorageWithTheObservation) {
  const auto metrics = every_statistic(SourceKind::residual_accumulator, LabelScope::layer);
  const std::vector<at::Tensor> observed = {
      at::rand({4, 2, 3}, at::kDouble),
      at::rand({4, 2, 3}, at::kFloat).requires_grad_(),
      at::rand({6, 3}, at::kFloat).t(),       // a non-contiguous view
      at::rand({1}, at::kFloat),              // one element
      at::rand({5}, at::kDouble),             // 1-D
      at::rand({4, 2, 3}).to(at::kBFloat16),  // upcast path
      at::rand({0, 2, 3}, at::kDouble),       // empty shard
  };
  for (const auto& x : observed) {
    MetricInput in{{"decoder.layers.0", "residual_accumulator", SourceKind::residual_accumulator},
                   x,
                   AxisPlacements{},
                   false,
                   1 % std::max<std::int64_t>(x.dim(), 1)};
    for (const auto& m : metrics) {
      const Prepared p = m->prepare(in);
      ASSERT_TRUE(p.value.defined()) << m->name();
      EXPECT_FALSE(p.value.storage().is_alias_of(x.storage())) << m->name() << " on " << x.sizes();
      EXPECT_FALSE(p.value.requires_grad()) << m->name();
      const auto expect_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
      if (m->name().find("count") == std::string::npos) {
        EXPECT_EQ(p.value.scalar_type(), expect_dtype) << m->name();
      }
    }
  }
}

TEST(MetricPrepare, AStaticBufferOverwrittenAfterTheCallbackDoesNotChangeResults) {
  MetricCollector c(every_statistic(SourceKind::residual_accumulator, LabelScope::layer),
                    ParallelTopology(1, 1, 1), 0);
  Owner layer("decoder.layers.0");
  at::Tensor buffer = at::rand({3, 2, 4}, at::kDouble);  // "static graph buffer"
  const at::Tensor original = buffer.clone();
  c.observe(layer, "residual_accumulator", SourceKind::residual_accumulator, buffer, 0, 0, 1,
            {0, 0, GraphPhase::replay});
  buffer.fill_(std::numeric_limits<double>::quiet_NaN());  // the next replay overwrites it
  RankGroups g = single_rank_groups();
  MetricExecutor ex(g);
  auto r = by_key(c.commit(ex));
  EXPECT_DOUBLE_EQ(r["l2@global"], original.norm().item<double>());
  EXPECT_DOUBLE_EQ(r["nan-count@global"], 0.0);
  EXPECT_NEAR(r["mean-row-l2@global"], original.reshape({-1, 4}).norm(2, {1}).mean().item<double>(),
              1e-14);
}

// The code-path fault prepare-aliases-buffer: max/min keep a view of the
// observed element, which the collector's storage rule rejects (parity check
// reports it as graph_replay's FAIL); fp32/fp64 only (bf16 upcasts: a copy).
TEST(MetricPrepare, PrepareAliasesBufferFaultIsRejectedByTheCollector) {
  Owner layer("decoder.layers.0");
  const at::Tensor x = at::rand({3, 2, 4}, at::kDouble);
  auto observe = [&](const at::Tensor& t) {
    MetricCollector c(every_statistic(SourceKind::residual_accumulator, LabelScope::layer),
                      ParallelTopology(1, 1, 1), 0);
    c.observe(layer, "residual_accumulator", SourceKind::residual_accumulator, t, 0, 0, 1,
              {0, 0, GraphPhase::eager});
  };
  EXPECT_NO_THROW(observe(x));
  CodePathFaultScope fault(fault_prepare_aliases_buffer);
  auto max = make_logical_metric(LogicalStatistic::max, "max",
                                 KindSet{SourceKind::residual_accumulator}, LabelScope::layer);
  MetricInput in{{"decoder.layers.0", "residual_accumulator", SourceKind::residual_accumulator},
                 x,
                 AxisPlacements{},
                 false,
                 1};
  const Prepared p = max->prepare(in);
  EXPECT_TRUE(p.value.storage().is_alias_of(x.storage()));
  EXPECT_EQ(p.value.item<double>(), x.max().item<double>());
  try {
    observe(x);
    FAIL() << "the aliasing prepared state was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("shares storage with the observed tensor"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(observe(x.to(at::kBFloat16)));
}

// The fault's reach: max and min of every non-empty fp32/fp64 tensor, one element included; an
// input the contribution converts (fp16 to fp32) is copied, as bf16 is.
TEST(MetricPrepare, PrepareAliasesBufferFaultAliasesMaxAndMinOfEveryNonEmptyTensor) {
  CodePathFaultScope fault(fault_prepare_aliases_buffer);
  const KindSet kinds{SourceKind::residual_accumulator};
  const MetricInput site{
      {"decoder.layers.0", "residual_accumulator", SourceKind::residual_accumulator},
      at::Tensor(),
      AxisPlacements{},
      false,
      1};
  auto input = [&](const at::Tensor& x) {
    MetricInput in = site;
    in.tensor = x;
    return in;
  };
  for (const LogicalStatistic statistic : {LogicalStatistic::max, LogicalStatistic::min}) {
    auto metric = make_logical_metric(statistic, "extreme", kinds, LabelScope::layer);
    for (const at::Tensor& x : {at::rand({3, 2, 4}, at::kDouble), at::rand({1}, at::kFloat)}) {
      const Prepared p = metric->prepare(input(x));
      EXPECT_TRUE(p.value.storage().is_alias_of(x.storage()))
          << (statistic == LogicalStatistic::max ? "max" : "min") << " of " << x.sizes();
      const at::Tensor expected = statistic == LogicalStatistic::max ? x.max() : x.min();
      EXPECT_EQ(p.value.item<double>(), expected.item<double>());
    }
    const at::Tensor half = at::rand({3, 4}).to(at::kHalf);
    EXPECT_FALSE(metric->prepare(input(half)).value.storage().is_alias_of(half.storage()));
  }
}

TEST(MetricPrepare, DimwiseMetricsRejectShardUnknownAndScalars) {
  auto row = make_dimwise_metric(DimwiseStatistic::mean_row_l2, "mean-row-l2",
                                 KindSet{SourceKind::residual_accumulator}, LabelScope::layer);
  MetricInput in{{"decoder.layers.0", "residual_accumulator", SourceKind::residual_accumulator},
                 at::ones({2, 2, 2}),
                 AxisPlacements{},
                 false,
                 1};
  in.placements.at(Axis::dp) = Shard{std::nullopt};
  try {
    row->prepare(in);
    FAIL() << "Shard(?) accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dp=Shard(?)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("decoder.layers.0.residual_accumulator"),
              std::string::npos);
  }
  in.placements = AxisPlacements{};
  in.tensor = at::ones({});
  EXPECT_THROW(row->prepare(in), std::invalid_argument);
  // Whole-tensor metrics accept Shard(?).
  auto l2 = make_logical_metric(LogicalStatistic::l2, "l2",
                                KindSet{SourceKind::residual_accumulator}, LabelScope::layer);
  in.tensor = at::ones({2, 2, 2});
  in.placements.at(Axis::dp) = Shard{std::nullopt};
  EXPECT_NO_THROW(l2->prepare(in));
}

// ---------------------------------------------------------------- single rank
TEST(MetricExecutor, SingleRankIssuesNoCollectiveAndMatchesDirectComputation) {
  MetricCollector c(every_statistic(SourceKind::residual_accumulator, LabelScope::layer),
                    ParallelTopology(1, 1, 1), 0);
  Owner l0("decoder.layers.0"), l1("decoder.layers.1");
  const at::Tensor a = at::randn({5, 4, 3}, at::kDouble);
  const at::Tensor b = at::randn({5, 4, 3}, at::kDouble);
  // Three microbatches of layer 0 along the batch dim (one empty), one of layer 1.
  const std::int64_t cuts[] = {0, 3, 3, 4};
  for (int m = 0; m < 3; ++m)
    c.observe(l0, "residual_accumulator", SourceKind::residual_accumulator,
              a.narrow(1, cuts[m], cuts[m + 1] - cuts[m]), std::nullopt, 0, 1,
              {0, m, GraphPhase::eager});
  c.observe(l1, "residual_accumulator", SourceKind::residual_accumulator, b, std::nullopt, 0, 1,
            {0, 0, GraphPhase::eager});
  RankGroups g = single_rank_groups();
  MetricExecutor ex(g);
  auto r = by_key(c.commit(ex));
  EXPECT_EQ(ex.stats().collectives, 0);
  EXPECT_EQ(ex.stats().local, ex.stats().requests);
  EXPECT_EQ(g.tp->calls_issued() + g.cp->calls_issued() + g.dp->calls_issued(), 0);
  const at::Tensor both = at::cat({a, b}, 1);
  auto col_l2 = [](const at::Tensor& t) { return t.reshape({-1, 3}).norm(2, {0}); };
  EXPECT_NEAR(r["l2@decoder.layers.0"], a.norm().item<double>(), 1e-12);
  EXPECT_NEAR(r["l2@global"], both.norm().item<double>(), 1e-12);
  EXPECT_NEAR(r["mean@decoder.layers.0"], a.mean().item<double>(), 1e-12);
  EXPECT_NEAR(r["rms@global"], both.pow(2).mean().sqrt().item<double>(), 1e-12);
  EXPECT_EQ(r["max@global"], both.max().item<double>());
  EXPECT_EQ(r["min@decoder.layers.1"], b.min().item<double>());
  EXPECT_EQ(r["abs-max@global"], both.abs().max().item<double>());
  // Concatenation, not a mean of means: column norms run over every microbatch.
  EXPECT_NEAR(r["mean-column-l2@decoder.layers.0"], col_l2(a).mean().item<double>(), 1e-12);
  EXPECT_NEAR(r["mean-column-l2@global"], at::cat({col_l2(a), col_l2(b)}).mean().item<double>(),
              1e-12);
  EXPECT_NEAR(r["mean-row-l2@global"], both.reshape({-1, 3}).norm(2, {1}).mean().item<double>(),
              1e-12);
}

// ---------------------------------------------------------------- one-read statistics
// A backend whose statistics hooks count their calls and, when `skew`, report
// four times the sums of squares (so l2, rms and the row/column L2 means
// double): the metrics read the hooks, once per observation (and direction).
class StatisticsBackend final : public Backend {
 public:
  explicit StatisticsBackend(bool skew) : skew_(skew) {}
  std::string_view name() const override { return "statistics-test"; }
  std::string_view transport_name() const override { return "gloo"; }
  std::unique_ptr<RngTracker> make_rng_tracker() const override { return nullptr; }
  TensorStatistics tensor_statistics(const at::Tensor& x) const override {
    ++calls;
    TensorStatistics s = Backend::tensor_statistics(x);
    if (skew_) s.sum_sq = s.sum_sq * 4;
    return s;
  }
  at::Tensor sums_of_squares(const at::Tensor& x, bool per_row) const override {
    ++sums_calls;
    const at::Tensor s = Backend::sums_of_squares(x, per_row);
    return skew_ ? s * 4 : s;
  }
  mutable int calls = 0, sums_calls = 0;

 private:
  bool skew_;
};

std::map<std::string, double> every_statistic_of_three_observations(const Backend* backend) {
  MetricCollector c(every_statistic(SourceKind::residual_accumulator, LabelScope::layer),
                    ParallelTopology(1, 1, 1), 0, backend);
  Owner l0("decoder.layers.0"), l1("decoder.layers.1");
  at::manual_seed(3);
  at::Tensor a = at::randn({5, 4, 3}, at::kFloat).to(at::kBFloat16);
  at::Tensor b = at::randn({5, 2, 3}, at::kFloat);
  b[1][1][2] = std::numeric_limits<float>::infinity();
  c.observe(l0, "residual_accumulator", SourceKind::residual_accumulator, a, std::nullopt, 0, 1,
            {0, 0, GraphPhase::eager});
  c.observe(l0, "residual_accumulator", SourceKind::residual_accumulator, a.narrow(1, 0, 0),
            std::nullopt, 0, 1, {0, 1, GraphPhase::eager});  // empty: the identity, no read
  c.observe(l1, "residual_accumulator", SourceKind::residual_accumulator, b, std::nullopt, 0, 1,
            {0, 0, GraphPhase::eager});
  RankGroups g = single_rank_groups();
  MetricExecutor ex(g);
  return by_key(c.commit(ex));
}

TEST(MetricPrepare, MetricsReadTheBackendsOneReadStatisticsOncePerObservation) {
  const std::map<std::string, double> alone = every_statistic_of_three_observations(nullptr);
  // The interface's default statistics are the metrics' own reductions: bit for bit.
  const StatisticsBackend plain(false);
  const std::map<std::string, double> hooked = every_statistic_of_three_observations(&plain);
  ASSERT_EQ(alone.size(), hooked.size());
  for (const auto& [key, v] : alone)
    EXPECT_TRUE(v == hooked.at(key) || (std::isnan(v) && std::isnan(hooked.at(key)))) << key;
  EXPECT_EQ(plain.calls, 2);       // two non-empty observations, eight logical metrics each
  EXPECT_EQ(plain.sums_calls, 6);  // rows and columns of all three (empty ones too)
  // And the metrics use what the hook returns.
  const StatisticsBackend skewed(true);
  const std::map<std::string, double> skew = every_statistic_of_three_observations(&skewed);
  EXPECT_DOUBLE_EQ(skew.at("l2@decoder.layers.0"), 2 * alone.at("l2@decoder.layers.0"));
  EXPECT_DOUBLE_EQ(skew.at("rms@decoder.layers.0"), 2 * alone.at("rms@decoder.layers.0"));
  EXPECT_EQ(skew.at("max@global"), alone.at("max@global"));
  EXPECT_DOUBLE_EQ(skew.at("mean-row-l2@decoder.layers.0"),
                   2 * alone.at("mean-row-l2@decoder.layers.0"));
  EXPECT_DOUBLE_EQ(skew.at("mean-column-l2@global"), 2 * alone.at("mean-column-l2@global"));
  EXPECT_EQ(skew.at("inf-count@decoder.layers.1"), 1.0);
}

TEST(MetricExecutor, EmptyPopulationsGiveTheIdentity) {
  MetricCollector c(every_statistic(SourceKind::residual_accumulator, LabelScope::layer),
                    ParallelTopology(1, 1, 1), 0);
  Owner l0("decoder.layers.0");
  c.observe(l0, "residual_accumulator", SourceKind::residual_accumulator,
            at::zeros({0, 2, 3}, at::kDouble), std::nullopt, 0, 1, {0, 0, GraphPhase::eager});
  RankGroups g = single_rank_groups();
  MetricExecutor ex(g);
  auto r = by_key(c.commit(ex));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(r["l2@global"], 0.0);
  EXPECT_EQ(r["max@global"], -inf);
  EXPECT_EQ(r["abs-max@global"], -inf);
  EXPECT_EQ(r["min@global"], inf);
  EXPECT_EQ(r["nan-count@global"], 0.0);
  EXPECT_TRUE(std::isnan(r["mean@global"]));         // 0 / 0
  EXPECT_TRUE(std::isnan(r["mean-row-l2@global"]));  // no rows
  EXPECT_EQ(r["mean-column-l2@global"], 0.0);        // 3 columns of norm 0
}

}  // namespace
}  // namespace parity
