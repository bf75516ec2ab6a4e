// router_invariance: what the router observes depends on the model and the
// valid tokens only (megatron-reference section 7, items 4 and 5). The run
// variant::router_inputs_changed is the scenario without forced routing and
// with every padding token's id shifted (--padding-token-shift): in step 0
// (identical weights) the first MoE layer's router sites must be bitwise
// identical to the scenario's: that router sees the same
// valid tokens through the same computation (causal attention never looks at
// the trailing padding). Later layers are not compared: forcing changes the
// routed experts, capacity lets padding displace valid tokens, and even
// dropless an expert's GEMM over a different number of rows rounds its rows
// differently.
//
// The same holds for what the router logs (--moe-per-layer-logging, field bug
// NVIDIA/Megatron-LM #1984): the first MoE layer's z-loss in step 0 (on the
// router's own logits, so also under forcing) and, without forcing, its
// load-balancing loss and, dropless, its expert load must be bitwise equal in
// both runs: padding tokens weigh nothing in any of them.
#include <cmath>

#include "harness/checks/properties/common.h"
#include "harness/config/model_mapping.h"
#include "harness/metrics/collector.h"

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

// The logged statistics of `layer` in step 0 that `h` must reproduce bitwise.
std::int64_t compare_logged_statistics(const CheckRun& a, const CheckRun& h,
                                       const std::string& layer, PropertyResult& p) {
  if (a.ranks.empty() || h.ranks.empty() || a.ranks[0].steps.empty() || h.ranks[0].steps.empty())
    return 0;
  const RunConfig& c = a.config;
  const bool forced = c.moe_force_routing != ForcedRouting::none;
  const auto& ma = a.ranks[0].steps[0].metrics;
  const auto& mh = h.ranks[0].steps[0].metrics;
  std::int64_t n = 0;
  for (const auto& [key, v] : ma) {
    const auto& [metric, label] = key;
    const bool wanted = (metric == "moe-z-loss" && label == layer) ||
                        (!forced && metric == "moe-load-balancing-loss" && label == layer) ||
                        (!forced && !(c.moe_capacity_factor > 0) && metric == "moe-expert-load" &&
                         label.rfind(layer + "/", 0) == 0);
    if (!wanted) continue;
    const auto it = mh.find(key);
    if (it == mh.end()) continue;
    ++n;
    if (!(v == it->second || (std::isnan(v) && std::isnan(it->second))))
      fail(p, "(" + a.name + ") step 0 " + metric + " [" + label + "] = " + num(v) + " != (" +
                  h.name + ") " + num(it->second) +
                  " (bitwise): the padding tokens' content shows in what the router logs");
  }
  return n;
}

}  // namespace

PropertyResult check_router_invariance(const CheckRun& a, const CheckRun* h) {
  PropertyResult p =
      make("router_invariance", "(" + a.name + ") vs " + run_ref(variant::router_inputs_changed));
  const RunConfig& c = a.config;
  if (c.moe_experts < 2) return skip(p, "the model has no MoE layer", "add --moe-experts 4");
  if (!h)
    return skip(p, "no forced routing and no padding: nothing may change what the router observes",
                "add --moe-force-routing random or --padding-fraction 0.25");
  p.compared = "(" + a.name + ") vs (" + h->name + ")";
  std::string first;  // the first MoE layer's label
  const ModelConfig model = model_config_from(c);
  for (std::int64_t i = 0; i < model.layers && first.empty(); ++i)
    if (model.moe.is_moe_layer(i, model.layers)) first = "decoder.layers." + std::to_string(i);
  const std::int64_t compared = compare_observations(a, *h, p, [&](const ObsKey& k) {
    const std::string& site = std::get<3>(k);
    return std::get<1>(k) == 0 && router_site(site) && layer_label(site) == first;
  });
  const std::int64_t logged = compare_logged_statistics(a, *h, first, p);
  if (compared == 0 && logged == 0)
    return skip(p, "no router observation and no logged router statistic in step 0", "");
  if (p.status == Status::pass)
    p.reason = std::to_string(compared) + " router observations and " + std::to_string(logged) +
               " logged router statistics of step 0 bitwise equal (" + first +
               ", the first MoE layer)";
  return p;
}

namespace {
class RouterInvariance final : public Property {
 public:
  std::string_view name() const override { return "router_invariance"; }
  std::string_view doc() const override {
    return "what the first MoE router observes and logs ignores forced routing and the padding "
           "tokens' content";
  }
  std::string_view needs() const override {
    return "--moe-experts with --moe-force-routing or --padding-fraction > 0";
  }
  std::vector<RunVariant> runs_needed(const RunConfig& scenario) const override {
    if (scenario.moe_experts >= 2 &&
        (scenario.moe_force_routing != ForcedRouting::none || scenario.padding_fraction > 0))
      return {variant::router_inputs_changed};
    return {};
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_router_invariance(runs.at(variant::scenario),
                                   runs.find(variant::router_inputs_changed));
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(RouterInvariance, 8)

}  // namespace parity::checks
