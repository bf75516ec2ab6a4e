#include "harness/checks/properties/common.h"

#include <cmath>
#include <cstdio>

#include "harness/config/model_mapping.h"
#include "harness/graphs/graph_scope.h"
#include "harness/metrics/collector.h"
#include "harness/metrics/metric_names.h"

namespace parity::checks {

std::string_view to_string(Status s) {
  switch (s) {
    case Status::pass:
      return "PASS";
    case Status::fail:
      return "FAIL";
    case Status::skip:
      return "SKIP";
  }
  return "?";
}

bool within(double x, double y, double tol, double* abs_err, double* rel_err) {
  double a = 0, r = 0;
  bool ok;
  if (std::isnan(x) || std::isnan(y)) {
    ok = std::isnan(x) && std::isnan(y);
    a = r = ok ? 0 : INFINITY;
  } else if (std::isinf(x) || std::isinf(y)) {
    ok = x == y;
    a = r = ok ? 0 : INFINITY;
  } else {
    a = std::fabs(x - y);
    r = y != 0 ? a / std::fabs(y) : (a == 0 ? 0 : INFINITY);
    ok = a <= tol * std::max(std::fabs(y), 1.0);
  }
  if (abs_err) *abs_err = a;
  if (rel_err) *rel_err = r;
  return ok;
}

namespace {
std::int64_t moe_layer_count(const RunConfig& c) {
  const ModelConfig m = model_config_from(c);
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < m.layers; ++i) n += m.moe.is_moe_layer(i, m.layers) ? 1 : 0;
  return n;
}
std::int64_t moe_sites_per_layer(const RunConfig& c) {
  return model_source_kinds(c).contains(SourceKind::router_diagnostics) ? 8 : 7;
}
}  // namespace

std::size_t expected_site_count(const RunConfig& c, std::size_t parameters, int stage) {
  // The layers the rank's stage builds (every layer without PP), each with its
  // sites; the logits and the MTP depths' logits where the loss is.
  const ModelConfig m = model_config_from(c);
  const PipelineLayoutConfig layout = m.pipeline_layout();
  std::int64_t sites = 0;
  for (int v = 0; v < virtual_stages(layout); ++v) {
    const std::int64_t first = layer_offset(layout, v, stage);
    for (std::int64_t i = first; i < first + num_layers_to_build(layout, v, stage); ++i)
      sites += m.moe.enabled() && m.moe.is_moe_layer(i, m.layers) ? moe_sites_per_layer(c) : 6;
  }
  if (loss_chunk(layout).pp_rank == stage) sites += 1 + c.mtp_layers;
  return static_cast<std::size_t>(sites) + (c.observe_wgrad ? parameters : 0);
}

std::string site_count_rule(const RunConfig& c) {
  const std::int64_t moe = moe_layer_count(c);
  const std::string built = c.pp > 1 ? " the stage builds" : "";
  std::string rule = moe == 0 ? "6 per layer" + built
                              : "6 per dense layer" + built + ", " +
                                    std::to_string(moe_sites_per_layer(c)) + " per MoE layer";
  rule += c.pp > 1 ? " + the logits on the last stage" : " + the logits";
  if (c.mtp_layers > 0) rule += " + one MTP logits site per depth";
  if (c.observe_wgrad) rule += " + one weight_gradient site per parameter of the rank";
  return rule;
}

bool captured_by_layer_graphs(const RunConfig& c, const std::string& site) {
  if (c.graphs != GraphMode::per_layer) return false;
  const std::optional<LayerStage> stage = layer_stage_of_site(site);
  if (!stage) return false;  // the residual stream and the logits: eager
  const ModelConfig m = model_config_from(c);
  bool moe_layer = false;
  try {
    moe_layer = m.moe.enabled() && m.moe.is_moe_layer(*layer_index_of_site(site), m.layers);
  } catch (const ModelConfigError&) {  // a run of a config that does not validate
  }
  return m.graph_scope.captures(*stage, moe_layer);
}

bool kind_captured_by_layer_graphs(const RunConfig& c, const std::string& kind) {
  if (c.graphs != GraphMode::per_layer) return false;
  const std::optional<SourceKind> source = source_kind_from_string(kind);
  if (!source) return false;  // the logged MoE statistics, the optimizer's norms
  const ModelConfig m = model_config_from(c);
  for (std::int64_t i = 0; i < m.layers; ++i) {
    bool moe_layer = false;
    try {
      moe_layer = m.moe.enabled() && m.moe.is_moe_layer(i, m.layers);
    } catch (const ModelConfigError&) {
    }
    for (LayerStage stage : layer_stages_of_kind(*source, moe_layer))
      if (m.graph_scope.captures(stage, moe_layer)) return true;
  }
  return false;
}

std::int64_t steps_with_identical_weights(const CheckRun& a, const CheckRun& c) {
  std::int64_t steps = 0;
  for (const RankRun& r : a.ranks) steps = std::max<std::int64_t>(steps, r.steps.size());
  if (a.config.lr == 0 && c.config.lr == 0) return steps;
  for (std::int64_t s = 0; s + 1 < steps; ++s)
    for (std::size_t r = 0; r < a.ranks.size() && r < c.ranks.size(); ++r) {
      if (static_cast<std::size_t>(s) >= a.ranks[r].steps.size() ||
          static_cast<std::size_t>(s) >= c.ranks[r].steps.size())
        return s + 1;
      if (a.ranks[r].steps[s].grads != c.ranks[r].steps[s].grads) return s + 1;
    }
  return steps;
}

namespace detail {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool counting_phase(const std::string& phase) { return phase == "eager" || phase == "record"; }

int shard_piece(const ParallelTopology& topology, int rank, const std::string& name) {
  const bool expert = name.find(".experts.local_experts.") != std::string::npos;
  return topology.coordinate(rank, expert ? Axis::etp : Axis::tp);
}

std::string metric_kind(const std::string& metric) {
  for (const MetricSpec& s : known_metrics())
    if (s.name == metric)
      return is_parameter_metric(metric) ? std::string(kParameterMetricKind)
                                         : std::string(to_string(s.kind));
  return "";
}

std::string run_list(const std::vector<const CheckRun*>& runs) {
  std::string out;
  for (const CheckRun* r : runs) out += (out.empty() ? "(" : ", (") + r->name + ")";
  return out;
}

std::vector<RunVariant> sharded_runs(const RunConfig& scenario) {
  if (dropout_on_many_ranks(scenario)) return {variant::eager_without_recompute_or_dropout};
  return {variant::scenario, variant::eager_without_recompute};
}

std::map<ObsKey, std::string> step_digests(const CheckRun& run) {
  std::map<ObsKey, std::string> out;
  for (const RankRun& r : run.ranks)
    for (const Observation& o : r.trace)
      // Weight gradients agree to summation-order rounding only across recompute
      // (the gradient comparisons see them); exactly_once counts their sites.
      if (counting_phase(o.phase) && o.step >= 0 &&
          o.kind != to_string(SourceKind::weight_gradient))
        out[{o.rank, o.step, o.microbatch, o.site}] = o.digest;
  return out;
}

std::string where(const std::string& run, const ObsKey& k) {
  return "(" + run + ") rank " + std::to_string(std::get<0>(k)) + " step " +
         std::to_string(std::get<1>(k)) + " microbatch " + std::to_string(std::get<2>(k)) + " " +
         std::get<3>(k);
}

PropertyResult make(std::string name, std::string compared) {
  PropertyResult p;
  p.name = std::move(name);
  p.compared = std::move(compared);
  p.status = Status::pass;
  return p;
}

void fail(PropertyResult& p, std::string reason, std::string site) {
  if (p.status == Status::fail) return;  // keep the first violation
  p.status = Status::fail;
  p.reason = std::move(reason);
  if (!site.empty()) {
    p.worst_label = layer_label(site);
    p.worst_site = std::move(site);
    if (p.worst_label.empty()) p.worst_label = "global";
  }
}

PropertyResult& skip(PropertyResult& p, std::string reason, std::string hint) {
  p.status = Status::skip;
  p.reason = std::move(reason);
  p.hint = std::move(hint);
  return p;
}

void ErrorTracker::add(double abs_err, double rel_err, const std::string& s, const std::string& l) {
  if (!any || rel_err > max_rel || (rel_err == max_rel && abs_err > max_abs)) {
    site = s;
    label = l;
  }
  any = true;
  max_abs = std::max(max_abs, abs_err);
  max_rel = std::max(max_rel, rel_err);
}

void ErrorTracker::into(PropertyResult& p) const {
  if (!any) return;
  p.max_abs = max_abs;
  p.max_rel = max_rel;
  if (p.worst_site.empty()) {
    p.worst_site = site;
    p.worst_label = label;
  }
}

std::int64_t compare_observations(const CheckRun& a, const CheckRun& c, PropertyResult& p,
                                  const std::function<bool(const ObsKey&)>& keep) {
  const auto da = step_digests(a), dc = step_digests(c);
  std::int64_t compared = 0;
  for (const auto& [k, d] : da) {
    if (!keep(k)) continue;
    auto it = dc.find(k);
    if (it == dc.end()) {
      fail(p, where(a.name, k) + " has no counterpart in (" + c.name + ")", std::get<3>(k));
      continue;
    }
    ++compared;
    if (it->second != d)
      fail(p, where(a.name, k) + ": digest " + d + " != (" + c.name + ") " + it->second,
           std::get<3>(k));
  }
  return compared;
}

void compare_losses(const CheckRun& a, const CheckRun& c, PropertyResult& p, std::int64_t identical,
                    double tol, const std::string& basis) {
  for (std::size_t r = 0; r < a.ranks.size() && r < c.ranks.size(); ++r)
    for (std::size_t s = 0; s < a.ranks[r].steps.size() && s < c.ranks[r].steps.size(); ++s) {
      const StepData &x = a.ranks[r].steps[s], &y = c.ranks[r].steps[s];
      if (static_cast<std::int64_t>(s) >= identical) {
        double ae = 0, re = 0;
        if (!within(x.loss, y.loss, tol, &ae, &re))
          fail(p, "(" + a.name + ") rank " + std::to_string(r) + " step " + std::to_string(s) +
                      ": loss " + num(x.loss) + " vs (" + c.name + ") " + num(y.loss) + " (rel " +
                      num(re) + " > " + (basis.empty() ? "" : basis + " rel ") + num(tol) + ")");
        continue;
      }
      if (!(x.loss == y.loss || (std::isnan(x.loss) && std::isnan(y.loss))))
        fail(p, "(" + a.name + ") rank " + std::to_string(r) + " step " + std::to_string(s) +
                    ": loss " + num(x.loss) + " != (" + c.name + ") " + num(y.loss) + " (bitwise)");
      if (x.logits_digest != y.logits_digest)
        fail(p,
             "(" + a.name + ") rank " + std::to_string(r) + " step " + std::to_string(s) +
                 ": logits digest " + x.logits_digest + " != (" + c.name + ") " + y.logits_digest,
             "output_layer.output_logits");
    }
}

std::int64_t compare_metrics_exact(
    const CheckRun& a, const CheckRun& c, PropertyResult& p,
    const std::function<bool(std::int64_t, const std::string&)>& keep) {
  std::int64_t n = 0;
  if (a.ranks.empty() || c.ranks.empty()) return 0;
  const std::int64_t identical = steps_with_identical_weights(a, c);
  const auto &sa = a.ranks[0].steps, &sc = c.ranks[0].steps;
  for (std::size_t s = 0; s < sa.size() && s < sc.size(); ++s)
    for (const auto& [key, v] : sa[s].metrics) {
      if (static_cast<std::int64_t>(s) >= identical) continue;
      // Norms of gradients and updated weights follow the gradients, which
      // recompute and graph replays may round differently (compared within the
      // gradient tolerance by these properties); sharded_reduction compares them.
      if (metric_kind(key.first) == kParameterMetricKind) continue;
      if (!keep(static_cast<std::int64_t>(s), metric_kind(key.first))) continue;
      auto it = sc[s].metrics.find(key);
      if (it == sc[s].metrics.end()) continue;
      ++n;
      const double w = it->second;
      if (!(v == w || (std::isnan(v) && std::isnan(w))))
        fail(p, "(" + a.name + ") step " + std::to_string(s) + " " + key.first + " [" + key.second +
                    "] = " + num(v) + " != (" + c.name + ") " + num(w) + " (bitwise)");
    }
  return n;
}

}  // namespace detail
}  // namespace parity::checks
