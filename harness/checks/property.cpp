#include "harness/checks/property.h"
#include "harness/base/check.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace parity::checks {

namespace {

// In report order; places[i] is properties[i]'s place.
struct Registry {
  std::vector<const Property*> properties;
  std::vector<int> places;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void CheckRuns::add(RunVariant variant, const CheckRun& run) {
  by_variant_.emplace_back(variant, &run);
  all_.push_back(&run);
}

const CheckRun* CheckRuns::find(RunVariant variant) const {
  for (const auto& [v, run] : by_variant_)
    if (v == variant) return run;
  return nullptr;
}

const CheckRun& CheckRuns::at(RunVariant variant) const {
  if (const CheckRun* run = find(variant)) return *run;
  PARITY_FAIL_INTERNAL("parity check: run " + run_ref(variant) + " " + label_of(variant).title +
                       " was not made");
}

PropertyResult evaluate_property(const Property& property, const CheckRuns& runs,
                                 std::vector<MetricComparison>* rows) {
  std::vector<RunVariant> needed = property.runs_needed(runs.scenario());
  needed.insert(needed.begin(), variant::scenario);
  for (RunVariant v : needed)
    if (!runs.find(v)) {
      PropertyResult p;
      p.name = std::string(property.name());
      p.status = Status::skip;
      p.reason = "run " + run_ref(v) + " (" + label_of(v).title + ") was not made";
      return p;
    }
  return property.evaluate(runs, rows);
}

PropertyRegistration::PropertyRegistration(const Property& property, int place) {
  Registry& r = registry();
  for (std::size_t i = 0; i < r.properties.size(); ++i)
    if (r.properties[i]->name() == property.name() || r.places[i] == place) {
      // A static initializer cannot report otherwise; no test can pass with this.
      const std::string_view other = r.properties[i]->name();
      std::fprintf(stderr,
                   "parity: PARITY_REGISTER_PROPERTY: %.*s (place %d) clashes with %.*s (place "
                   "%d): one name and one place per property\n",
                   static_cast<int>(property.name().size()), property.name().data(), place,
                   static_cast<int>(other.size()), other.data(), r.places[i]);
      std::abort();
    }
  const std::size_t at = static_cast<std::size_t>(
      std::upper_bound(r.places.begin(), r.places.end(), place) - r.places.begin());
  r.properties.insert(r.properties.begin() + static_cast<std::ptrdiff_t>(at), &property);
  r.places.insert(r.places.begin() + static_cast<std::ptrdiff_t>(at), place);
}

const std::vector<const Property*>& registered_properties() {
  const std::vector<const Property*>& properties = registry().properties;
  if (properties.empty())
    PARITY_FAIL_INTERNAL(
        "parity: no property is registered (the objects of parity_check_properties were not "
        "linked)");
  return properties;
}

const Property* find_property(std::string_view name) {
  for (const Property* p : registered_properties())
    if (p->name() == name) return p;
  return nullptr;
}

}  // namespace parity::checks
