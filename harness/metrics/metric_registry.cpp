#include "harness/metrics/metric_registry.h"
#include "harness/base/check.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace parity {
namespace {

std::vector<StatisticRegistration>& registry() {
  static std::vector<StatisticRegistration> r;  // built before main, read after
  return r;
}

}  // namespace

bool register_statistic(StatisticRegistration r) {
  std::vector<StatisticRegistration>& all = registry();
  for (const StatisticRegistration& e : all)
    if (e.statistic == r.statistic || e.order == r.order)
      PARITY_FAIL_INTERNAL("statistic " + std::string(r.statistic) + " (order " +
                           std::to_string(r.order) + ") registered twice");
  all.push_back(std::move(r));
  std::sort(all.begin(), all.end(),
            [](const StatisticRegistration& a, const StatisticRegistration& b) {
              return a.order < b.order;
            });
  return true;
}

const std::vector<StatisticRegistration>& registered_statistics() { return registry(); }

const StatisticRegistration* find_statistic(std::string_view statistic) {
  for (const StatisticRegistration& r : registry())
    if (r.statistic == statistic) return &r;
  return nullptr;
}

}  // namespace parity
