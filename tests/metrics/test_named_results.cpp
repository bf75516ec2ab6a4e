// The collector's layer_rollup scope and named results, with a probe metric
// that reports what its one program was given: every site's merged value with
// its layer label, results under the labels the metric names (sorted, the
// program's own label nowhere), and a count mismatch is an error.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <stdexcept>

#include "harness/metrics/collector.h"
#include "harness/metrics/executor.h"
#include "tests/support/rank_threads.h"

namespace parity {
namespace {

// One named result per value: "<layer or (none)>/rows" = the rows its
// microbatches held; plus "programs" = 1, once per program.
class RowsPerLayer final : public Metric {
 public:
  explicit RowsPerLayer(bool miscount = false)
      : Metric("rows", KindSet{SourceKind::router_diagnostics}, LabelScope::layer_rollup),
        miscount_(miscount) {}
  Prepared prepare(const MetricInput& input) const override {
    Prepared p;
    p.value = at::full({}, static_cast<double>(input.tensor.size(0)), at::kDouble);
    return p;
  }
  Prepared merge(std::vector<Prepared> microbatches) const override {
    Prepared p = microbatches.front();
    for (std::size_t i = 1; i < microbatches.size(); ++i) p.value = p.value + microbatches[i].value;
    return p;
  }
  MetricStep start(std::vector<Prepared> values) const override {
    std::vector<std::string> labels{"programs"};
    std::vector<at::Tensor> out{at::ones({}, at::kDouble)};
    for (const Prepared& v : values) {
      labels.push_back((v.layer.empty() ? "(none)" : v.layer) + "/rows");
      out.push_back(v.value);
    }
    if (miscount_) labels.pop_back();
    return MetricStep::finished_named(at::stack(out), labels);
  }

 private:
  bool miscount_;
};

std::vector<MetricResult> commit_single_rank(MetricCollector& collector) {
  std::vector<MetricResult> out;
  testing::ThreadRun run = testing::run_thread_ranks(
      ParallelTopology(1, 1, 1), GroupOptions{},
      [&](int, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        MetricExecutor executor(groups);
        out = collector.commit(executor);
      });
  EXPECT_EQ(run.report(), "");
  return out;
}

void observe(MetricCollector& c, const std::string& owner, std::int64_t rows, std::int64_t mb) {
  c.observe_placed({owner, "router_diagnostics", SourceKind::router_diagnostics},
                   at::zeros({rows, 2}), AxisPlacements{}, 0, {0, mb, GraphPhase::eager});
}

TEST(LayerRollup, OneProgramOverEverySiteNamesItsResults) {
  MetricCollector c({std::make_shared<RowsPerLayer>()}, ParallelTopology(1, 1, 1), 0);
  observe(c, "decoder.layers.1.mlp.router", 3, 0);
  observe(c, "decoder.layers.1.mlp.router", 2, 1);  // a second microbatch merges
  observe(c, "decoder.layers.0.mlp.router", 4, 0);
  observe(c, "output_layer", 5, 0);  // no layer label
  const std::vector<MetricResult> got = commit_single_rank(c);
  std::vector<std::string> labels;
  std::vector<double> values;
  for (const MetricResult& r : got) {
    EXPECT_EQ(r.metric, "rows");
    labels.push_back(r.label);
    values.push_back(r.value);
  }
  // Sorted by label, one program ("programs" once), each value with its layer.
  EXPECT_EQ(labels, (std::vector<std::string>{"(none)/rows", "decoder.layers.0/rows",
                                              "decoder.layers.1/rows", "programs"}));
  EXPECT_EQ(values, (std::vector<double>{5, 4, 5, 1}));
}

TEST(LayerRollup, AValueCountOtherThanTheLabelCountIsAnError) {
  MetricCollector c({std::make_shared<RowsPerLayer>(/*miscount=*/true)}, ParallelTopology(1, 1, 1),
                    0);
  observe(c, "decoder.layers.0.mlp.router", 1, 0);
  std::string error;
  testing::ThreadRun run = testing::run_thread_ranks(
      ParallelTopology(1, 1, 1), GroupOptions{},
      [&](int, RankGroups& groups, RankStatus&, testing::Expect&, testing::RankOutcome&) {
        MetricExecutor executor(groups);
        try {
          c.commit(executor);
        } catch (const std::logic_error& e) {
          error = e.what();
        }
      });
  ASSERT_EQ(run.report(), "");
  EXPECT_NE(error.find("2 named values for 1 labels"), std::string::npos) << error;
}

}  // namespace
}  // namespace parity
