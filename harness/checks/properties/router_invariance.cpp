// router_invariance: what the router observes depends on the model and the
// valid tokens only (megatron-reference section 7, items 4 and 5). Run (h) is
// (a) without forced routing and with every padding token's id shifted
// (--padding-token-shift): in step 0 (identical weights) the router sites that
// neither change can reach must be bitwise identical to (a)'s. Forced routing
// changes the routed experts, so the layers after the first MoE layer differ
// by design; the first MoE layer's router sees the same input in both runs.
// Capacity dropping lets padding tokens displace valid ones, so with it only
// the first MoE layer is compared too.
#include "harness/checks/properties/common.h"
#include "harness/metrics/collector.h"
#include "harness/model/model_config.h"

namespace parity::checks {

using namespace detail;

namespace {

bool router_site(const std::string& site) {
  for (const char* s : {".router.router_logits", ".router.router_scores"})
    if (site.size() > std::string(s).size() &&
        site.compare(site.size() - std::string(s).size(), std::string::npos, s) == 0)
      return true;
  return false;
}

}  // namespace

PropertyResult check_router_invariance(const CheckRun& a, const CheckRun* h) {
  PropertyResult p = make("router_invariance", "(" + a.name + ") vs (h)");
  const RunConfig& c = a.config;
  if (c.moe_experts < 2)
    return skip(p, "the model has no MoE layer", "add --moe-experts 4");
  if (!h)
    return skip(p,
                "no forced routing and no padding: nothing may change what the router observes",
                "add --moe-force-routing random or --padding-fraction 0.25");
  p.compared = "(" + a.name + ") vs (" + h->name + ")";
  // The first MoE layer's label; later ones only without forcing and capacity.
  std::string first;
  for (std::int64_t i = 0; i < c.layers && first.empty(); ++i) {
    MoeConfig m;
    m.experts = c.moe_experts;
    m.layers = c.moe_layers;
    if (m.is_moe_layer(i, c.layers)) first = "decoder.layers." + std::to_string(i);
  }
  const bool all_layers = c.moe_force_routing == ForceRoutingOption::none &&
                          c.moe_capacity_factor == 0;
  const std::int64_t compared = compare_observations(a, *h, p, [&](const ObsKey& k) {
    const std::string& site = std::get<3>(k);
    return std::get<1>(k) == 0 && router_site(site) && (all_layers || layer_label(site) == first);
  });
  if (compared == 0)
    return skip(p, "no router observation in step 0", "");
  if (p.status == Status::pass)
    p.reason = std::to_string(compared) + " router observations of step 0 bitwise equal (" +
               (all_layers ? "every MoE layer" : first) + ")";
  return p;
}

namespace {
class RouterInvariance final : public Property {
 public:
  std::string_view name() const override { return "router_invariance"; }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_router_invariance(*runs.a, runs.h);
  }
};
}  // namespace

const Property& router_invariance_property() {
  static const RouterInvariance property;
  return property;
}

}  // namespace parity::checks
