// determinism: the same scenario and seed give byte-identical rank results.
#include "harness/checks/properties/common.h"

namespace parity::checks {

using namespace detail;

PropertyResult check_determinism(const CheckRun& a, const CheckRun& again) {
  PropertyResult p = make("determinism", "(" + a.name + ") vs (" + again.name + ")");
  const std::string x = a.results.dump(), y = again.results.dump();
  if (a.results.empty()) return skip(p, "(" + a.name + ") returned no rank result", "");
  if (x == y) {
    p.reason = "rank results byte-identical (" + std::to_string(x.size()) +
               " bytes of JSON without timing fields)";
    return p;
  }
  for (std::size_t r = 0; r < a.results.size() && r < again.results.size(); ++r) {
    const nlohmann::json &u = a.results[r], &v = again.results[r];
    if (u == v) continue;
    for (const auto& [key, value] : u.items()) {
      if (v.contains(key) && v[key] == value) continue;
      std::string detail = "rank " + std::to_string(r) + ": \"" + key + "\" differs";
      if (key == "steps" && v.contains(key))
        for (std::size_t s = 0; s < value.size() && s < v[key].size(); ++s)
          for (const auto& [k2, w] : value[s].items())
            if (!v[key][s].contains(k2) || v[key][s][k2] != w) {
              detail = "rank " + std::to_string(r) + " step " + std::to_string(s) + ": \"" + k2 +
                       "\" differs";
              fail(p, detail);
            }
      fail(p, detail);
    }
  }
  fail(p, "the rank results differ");
  return p;
}

namespace {
class Determinism final : public Property {
 public:
  std::string_view name() const override { return "determinism"; }
  std::string_view doc() const override {
    return "the scenario run twice gives byte-identical rank results";
  }
  std::string_view needs() const override { return "nothing: every run compares"; }
  std::vector<RunVariant> runs_needed(const RunConfig&) const override {
    return {variant::scenario_again};
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_determinism(runs.at(variant::scenario), runs.at(variant::scenario_again));
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(Determinism, 6)

}  // namespace parity::checks
