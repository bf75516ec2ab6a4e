// harness/metrics/metric_registry.h: every statistic registered beside its
// implementation names at least one metric, documents itself and builds a
// metric of the spec's name; the registry refuses a statistic twice.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "harness/metrics/metric_registry.h"

namespace parity {
namespace {

TEST(MetricRegistry, EveryStatisticIsDocumentedOfferedAndBuildsItsMetrics) {
  const std::vector<StatisticRegistration>& statistics = registered_statistics();
  ASSERT_FALSE(statistics.empty());
  for (std::size_t i = 1; i < statistics.size(); ++i)
    EXPECT_LT(statistics[i - 1].order, statistics[i].order);
  std::set<std::string> offered;
  for (const MetricSpec& spec : known_metrics()) {
    if (spec.source == MetricSource::parameters) {
      EXPECT_THROW(make_metric(spec), std::invalid_argument) << spec.name;
      continue;
    }
    offered.insert(spec.statistic);
    const std::shared_ptr<const Metric> m = make_metric(spec);
    ASSERT_NE(m, nullptr) << spec.name;
    EXPECT_EQ(m->name(), spec.name);
    EXPECT_EQ(m->scope(), spec.scope) << spec.name;
  }
  for (const StatisticRegistration& r : statistics) {
    EXPECT_FALSE(r.doc.empty()) << r.statistic;
    EXPECT_NE(r.make, nullptr) << r.statistic;
    EXPECT_TRUE(offered.count(std::string(r.statistic))) << r.statistic << " names no metric";
  }
}

TEST(MetricRegistry, NamesAreUniqueAndFollowTheScopeKindStatisticPattern) {
  std::set<std::string> names;
  for (const MetricSpec& spec : known_metrics()) {
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name << " twice";
    EXPECT_TRUE(spec.name.rfind("layer-", 0) == 0 || spec.name.rfind("global-", 0) == 0)
        << spec.name;
  }
  // The first-wave names are derived: scope, kind, statistic.
  EXPECT_TRUE(names.count("layer-residual-contribution-l2"));
  EXPECT_TRUE(names.count("global-output-logits-mean-column-l2"));
  EXPECT_TRUE(names.count("layer-router-logits-sampled-median"));
  EXPECT_FALSE(names.count("global-router-logits-sampled-median"));
}

TEST(MetricRegistry, RefusesAStatisticOrAPlaceTwice) {
  const StatisticRegistration& l2 = *find_statistic("l2");
  StatisticRegistration again = l2;
  again.order = 1000;
  EXPECT_THROW(register_statistic(again), std::logic_error);
  StatisticRegistration same_place = l2;
  same_place.statistic = "l2-again";
  EXPECT_THROW(register_statistic(same_place), std::logic_error);
  EXPECT_EQ(find_statistic("l2-again"), nullptr);
}

}  // namespace
}  // namespace parity
