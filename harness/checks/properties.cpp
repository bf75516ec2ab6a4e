#include "harness/checks/properties.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "harness/metrics/collector.h"
#include "harness/metrics/metric_names.h"

namespace parity::checks {

namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool counting_phase(const std::string& phase) { return phase == "eager" || phase == "record"; }

// The kind a metric observes ("" when unknown).
std::string metric_kind(const std::string& metric) {
  for (const MetricSpec& s : known_metrics())
    if (s.name == metric) return std::string(to_string(s.kind));
  return "";
}

using ObsKey = std::tuple<int, std::int64_t, std::int64_t, std::string>;  // rank, step, mb, site

// Step observations (eager/record) by (rank, step, microbatch, site) -> digest.
std::map<ObsKey, std::string> step_digests(const CheckRun& run) {
  std::map<ObsKey, std::string> out;
  for (const RankRun& r : run.ranks)
    for (const Observation& o : r.trace)
      if (counting_phase(o.phase) && o.step >= 0) out[{o.rank, o.step, o.microbatch, o.site}] = o.digest;
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

void fail(PropertyResult& p, std::string reason, std::string site = "") {
  if (p.status == Status::fail) return;  // keep the first violation
  p.status = Status::fail;
  p.reason = std::move(reason);
  if (!site.empty()) {
    p.worst_site = site;
    p.worst_label = layer_label(site);
    if (p.worst_label.empty()) p.worst_label = "global";
  }
}

struct ErrorTracker {
  double max_abs = 0, max_rel = 0;
  std::string site, label;
  bool any = false;
  void add(double abs_err, double rel_err, const std::string& s, const std::string& l) {
    if (!any || rel_err > max_rel || (rel_err == max_rel && abs_err > max_abs)) {
      site = s;
      label = l;
    }
    any = true;
    max_abs = std::max(max_abs, abs_err);
    max_rel = std::max(max_rel, rel_err);
  }
  void into(PropertyResult& p) const {
    if (!any) return;
    p.max_abs = max_abs;
    p.max_rel = max_rel;
    if (p.worst_site.empty()) {
      p.worst_site = site;
      p.worst_label = label;
    }
  }
};

// Bitwise comparison of step observations of `a` against `c` (filter on a's keys).
template <typename Filter>
std::int64_t compare_observations(const CheckRun& a, const CheckRun& c, PropertyResult& p,
                                  Filter&& keep) {
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

}  // namespace

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

namespace {

// Losses and logits bitwise for steps < identical; later steps (weights updated
// with gradients that differ by rounding) compare losses within `tol`.
void compare_losses(const CheckRun& a, const CheckRun& c, PropertyResult& p,
                    std::int64_t identical = 1 << 30, double tol = 0) {
  for (std::size_t r = 0; r < a.ranks.size() && r < c.ranks.size(); ++r)
    for (std::size_t s = 0; s < a.ranks[r].steps.size() && s < c.ranks[r].steps.size(); ++s) {
      const StepData &x = a.ranks[r].steps[s], &y = c.ranks[r].steps[s];
      if (static_cast<std::int64_t>(s) >= identical) {
        double ae = 0, re = 0;
        if (!within(x.loss, y.loss, tol, &ae, &re))
          fail(p, "(" + a.name + ") rank " + std::to_string(r) + " step " + std::to_string(s) +
                      ": loss " + num(x.loss) + " vs (" + c.name + ") " + num(y.loss) + " (rel " +
                      num(re) + " > " + num(tol) + ")");
        continue;
      }
      if (!(x.loss == y.loss || (std::isnan(x.loss) && std::isnan(y.loss))))
        fail(p, "(" + a.name + ") rank " + std::to_string(r) + " step " + std::to_string(s) +
                    ": loss " + num(x.loss) + " != (" + c.name + ") " + num(y.loss) + " (bitwise)");
      if (x.logits_digest != y.logits_digest)
        fail(p, "(" + a.name + ") rank " + std::to_string(r) + " step " + std::to_string(s) +
                    ": logits digest " + x.logits_digest + " != (" + c.name + ") " + y.logits_digest,
             "output_layer.output_logits");
    }
}

// Metric values of `a` against `c`, bitwise; `keep(step, kind)` filters.
template <typename Filter>
std::int64_t compare_metrics_exact(const CheckRun& a, const CheckRun& c, PropertyResult& p,
                                   Filter&& keep) {
  std::int64_t n = 0;
  if (a.ranks.empty() || c.ranks.empty()) return 0;
  const std::int64_t identical = steps_with_identical_weights(a, c);
  const auto &sa = a.ranks[0].steps, &sc = c.ranks[0].steps;
  for (std::size_t s = 0; s < sa.size() && s < sc.size(); ++s)
    for (const auto& [key, v] : sa[s].metrics) {
      if (static_cast<std::int64_t>(s) >= identical) continue;
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

}  // namespace

std::string_view to_string(Status s) {
  switch (s) {
    case Status::pass: return "PASS";
    case Status::fail: return "FAIL";
    case Status::skip: return "SKIP";
  }
  return "?";
}

double metric_tolerance(DType d) {
  switch (d) {
    case DType::fp64: return 1e-10;
    case DType::fp32: return 1e-5;
    case DType::bf16: return 5e-2;
  }
  return 1e-5;
}

double gradient_tolerance(DType d) {
  switch (d) {
    case DType::fp64: return 1e-12;
    case DType::fp32: return 1e-6;
    case DType::bf16: return 1e-2;
  }
  return 1e-6;
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

bool inside_graphed_layer(const std::string& kind) {
  return kind == "attention_context" || kind == "mlp_output" || kind == "layernorm_output";
}

namespace {

// Whether `kind` is observed in an eager/record phase at `step` of a run with
// config `c` (per-layer graphs silence the layer's inside on replay steps;
// full-iteration graphs observe eagerly only before the capture).
bool observed_in_counting_phase(const RunConfig& c, const std::string& kind, std::int64_t step) {
  switch (c.graphs) {
    case GraphOption::none: return true;
    case GraphOption::per_layer: return step == 0 || !inside_graphed_layer(kind);
    case GraphOption::full_iteration: return step < c.graph_warmup;
  }
  return true;
}

// The run of `runs` that (run) is ordered against: same sharding and shape, no
// recompute, no graphs (the last such: (c) rather than a single-rank (b));
// null when (run) is such a run itself or none exists.
const CheckRun* order_reference(const CheckRun& run, const std::vector<const CheckRun*>& runs) {
  const RunConfig& a = run.config;
  if (a.recompute == "none" && a.graphs == GraphOption::none) return nullptr;
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    const CheckRun* r = *it;
    const RunConfig& c = r->config;
    if (r == &run || c.recompute != "none" || c.graphs != GraphOption::none) continue;
    if (c.tp == a.tp && c.cp == a.cp && c.dp == a.dp && c.sp == a.sp && c.layers == a.layers &&
        c.steps == a.steps && c.microbatches == a.microbatches && r->ranks.size() == run.ranks.size())
      return r;
  }
  return nullptr;
}

// Per rank, step and microbatch: (run)'s eager/record observations against the
// reference's, position by position (the site order; the grad
// mode too when (run) has no recompute). Returns the sequences compared.
std::int64_t compare_observation_order(const CheckRun& run, const CheckRun& ref, PropertyResult& p) {
  using Key = std::tuple<int, std::int64_t, std::int64_t>;  // rank, step, microbatch
  const bool same_grad_mode = run.config.recompute == "none";
  std::map<Key, std::vector<const Observation*>> got, want;
  for (const RankRun& r : run.ranks)
    for (const Observation& o : r.trace)
      if (counting_phase(o.phase) && o.step >= 0) got[{o.rank, o.step, o.microbatch}].push_back(&o);
  for (const RankRun& r : ref.ranks)
    for (const Observation& o : r.trace)
      if (counting_phase(o.phase) && o.step >= 0 && observed_in_counting_phase(run.config, o.kind, o.step))
        want[{o.rank, o.step, o.microbatch}].push_back(&o);
  auto text = [](const Observation* o) {
    return o == nullptr ? std::string("nothing")
                        : o->site + " (" + o->phase + ", grad " + (o->grad_mode ? "on" : "off") + ")";
  };
  std::int64_t compared = 0;
  for (const auto& [key, expected] : want) {
    const std::vector<const Observation*>& seen = got[key];
    ++compared;
    for (std::size_t i = 0; i < std::max(seen.size(), expected.size()); ++i) {
      const Observation* x = i < seen.size() ? seen[i] : nullptr;
      const Observation* y = i < expected.size() ? expected[i] : nullptr;
      if (x && y && x->site == y->site && (!same_grad_mode || x->grad_mode == y->grad_mode)) continue;
      const auto& [rank, step, mb] = key;
      fail(p, "(" + run.name + ") rank " + std::to_string(rank) + " step " + std::to_string(step) +
                  " microbatch " + std::to_string(mb) + ": observation #" + std::to_string(i) +
                  " is " + text(x) + ", the reference (" + ref.name + ") observes " + text(y) +
                  " there (forward order" + (same_grad_mode ? " and grad mode" : "") + ")",
           x ? x->site : y->site);
      break;
    }
  }
  return compared;
}

}  // namespace

PropertyResult check_exactly_once(const std::vector<const CheckRun*>& runs) {
  std::string compared;
  for (const CheckRun* r : runs) compared += (compared.empty() ? "" : ", ") + ("(" + r->name + ")");
  PropertyResult p = make("exactly_once", compared);
  std::int64_t checked = 0;
  for (const CheckRun* run : runs) {
    const RunConfig& c = run->config;
    // Per layer: two norm probes, the attention and MLP probes, two residuals.
    const std::size_t expected_sites = static_cast<std::size_t>(c.layers) * 6 + 1;
    for (const RankRun& r : run->ranks) {
      // (step, microbatch, site, phase) -> count
      std::map<std::tuple<std::int64_t, std::int64_t, std::string, std::string>, int> seen, want;
      std::map<std::string, std::string> sites;  // site -> kind
      for (const Observation& o : r.trace) {
        ++seen[{o.step, o.microbatch, o.site, o.phase}];
        sites[o.site] = o.kind;
      }
      if (sites.size() != expected_sites) {
        fail(p, "(" + run->name + ") rank " + std::to_string(r.rank) + ": " +
                    std::to_string(sites.size()) + " distinct sites observed, expected " +
                    std::to_string(expected_sites) + " (6 per layer + the logits)");
        continue;
      }
      const std::int64_t K = c.graph_warmup;
      for (const auto& [site, kind] : sites) {
        const bool inside = inside_graphed_layer(kind);
        if (c.graphs == GraphOption::per_layer && inside) {
          if (K > 0) want[{-1, -1, site, "warmup"}] = static_cast<int>(K);
          want[{-1, -1, site, "capture"}] = 1;
        }
        for (std::int64_t s = 0; s < c.steps; ++s)
          for (std::int64_t m = 0; m < c.microbatches; ++m) {
            switch (c.graphs) {
              case GraphOption::none: want[{s, m, site, "eager"}] = 1; break;
              case GraphOption::per_layer:
                if (!inside) want[{s, m, site, "eager"}] = 1;
                else if (s == 0) want[{s, m, site, "record"}] = 1;
                break;
              case GraphOption::full_iteration:
                if (s < K) want[{s, m, site, "eager"}] = 1;
                else if (s == K) want[{s, m, site, "capture"}] = 1;
                break;
            }
          }
      }
      auto describe = [&](const auto& key, int n, int expected) {
        const auto& [s, m, site, phase] = key;
        return "(" + run->name + ") rank " + std::to_string(r.rank) + " step " + std::to_string(s) +
               " microbatch " + std::to_string(m) + " " + site + ": " + std::to_string(n) +
               " observation(s) in phase " + phase + ", expected " + std::to_string(expected);
      };
      for (const auto& [key, n] : seen) {
        auto it = want.find(key);
        const int expected = it == want.end() ? 0 : it->second;
        if (n != expected) fail(p, describe(key, n, expected), std::get<2>(key));
      }
      for (const auto& [key, n] : want) {
        ++checked;
        if (!seen.count(key)) fail(p, describe(key, 0, n), std::get<2>(key));
      }
    }
  }
  std::int64_t ordered = 0;
  std::string ordered_runs;
  for (const CheckRun* run : runs)
    if (const CheckRun* ref = order_reference(*run, runs)) {
      ordered += compare_observation_order(*run, *ref, p);
      ordered_runs += (ordered_runs.empty() ? "" : ", ") + ("(" + run->name + ") vs (" + ref->name + ")");
    }
  if (p.status == Status::pass) {
    p.reason = std::to_string(checked) + " (rank, step, microbatch, site, phase) expectations met";
    if (!ordered_runs.empty())
      p.reason += "; " + std::to_string(ordered) + " (rank, step, microbatch) sequences in forward order, " +
                  ordered_runs;
  }
  return p;
}

PropertyResult check_recompute_invariance(const CheckRun& a, const CheckRun& c) {
  PropertyResult p = make("recompute_invariance", "(" + a.name + ") vs (" + c.name + ")");
  if (a.config.recompute == "none") {
    p.status = Status::skip;
    p.reason = "the scenario has no recompute";
    return p;
  }
  if (a.config.graphs == GraphOption::full_iteration && a.config.graph_warmup == 0) {
    p.status = Status::skip;
    p.reason = "full-iteration graphs with graph warmup 0: every step is captured or replayed, "
               "both bypass checkpoints, so nothing is recomputed";
    return p;
  }
  const double tol = gradient_tolerance(a.config.dtype);
  const std::int64_t identical = steps_with_identical_weights(a, c);
  const std::int64_t obs = compare_observations(
      a, c, p, [&](const ObsKey& k) { return std::get<1>(k) < identical; });
  if (obs == 0) fail(p, "no step observation to compare (no trace?)");
  compare_losses(a, c, p, identical, tol);
  compare_metrics_exact(a, c, p, [](std::int64_t, const std::string&) { return true; });
  ErrorTracker err;
  std::int64_t grads = 0, bitwise = 0;
  for (std::size_t r = 0; r < a.ranks.size() && r < c.ranks.size(); ++r)
    for (std::size_t s = 0; s < a.ranks[r].steps.size() && s < c.ranks[r].steps.size(); ++s) {
      const StepData &x = a.ranks[r].steps[s], &y = c.ranks[r].steps[s];
      for (const auto& [name, d] : x.grads) {
        ++grads;
        auto it = y.grads.find(name);
        if (it == y.grads.end()) {
          fail(p, "gradient " + name + " missing in (" + c.name + ")", name);
          continue;
        }
        if (it->second == d) {
          ++bitwise;
          err.add(0, 0, name, "");
          continue;
        }
        double ae = 0, re = 0;
        const double nx = x.grad_norms.count(name) ? x.grad_norms.at(name) : NAN;
        const double ny = y.grad_norms.count(name) ? y.grad_norms.at(name) : NAN;
        const bool ok = within(nx, ny, tol, &ae, &re);
        err.add(ae, re, name, "");
        if (!ok)
          fail(p, "rank " + std::to_string(r) + " step " + std::to_string(s) + " gradient " + name +
                      ": norm " + num(nx) + " vs " + num(ny) + " (rel " + num(re) + " > " +
                      num(tol) + ")",
               name);
      }
    }
  err.into(p);
  std::int64_t steps = a.ranks.empty() ? 0 : static_cast<std::int64_t>(a.ranks[0].steps.size());
  const std::string later =
      identical < steps ? " (steps " + std::to_string(identical) + "+ not bitwise: the gradients "
                          "of step " + std::to_string(identical - 1) + " differ by rounding, so "
                          "the updated weights differ; their losses within rel " + num(tol) + ")"
                        : "";
  p.note = std::to_string(obs) + " observations, losses, logits and metrics of steps < " +
           std::to_string(identical) + " bitwise" + later + "; " +
           std::to_string(bitwise) + "/" + std::to_string(grads) + " gradients bitwise" +
           (bitwise < grads ? ", the rest within " + std::string(to_string(a.config.dtype)) +
                                  " rel " + num(tol) + " (gradient L2 norms)"
                            : "");
  if (p.status == Status::pass) p.reason = p.note;
  return p;
}

PropertyResult check_sharded_reduction(const CheckRun& single,
                                       const std::vector<const CheckRun*>& sharded,
                                       std::vector<MetricComparison>* rows) {
  std::string compared;
  for (const CheckRun* r : sharded)
    compared += (compared.empty() ? "(" : ", (") + r->name + ") vs (" + single.name + ")";
  PropertyResult p = make("sharded_reduction", compared);
  const double tol = metric_tolerance(single.config.dtype);
  ErrorTracker err;
  std::int64_t n = 0;
  if (single.ranks.empty()) {
    fail(p, "the single-rank run returned nothing");
    return p;
  }
  const auto& ref = single.ranks[0].steps;
  std::string worst_reason;
  double worst_rel = -1;
  for (const CheckRun* run : sharded) {
    if (run->ranks.empty() || run->config.metrics.empty()) continue;
    // Every rank holds the same (globally reduced) results.
    for (const RankRun& r : run->ranks)
      for (std::size_t s = 0; s < r.steps.size() && s < run->ranks[0].steps.size(); ++s)
        for (const auto& [key, v] : r.steps[s].metrics) {
          auto it = run->ranks[0].steps[s].metrics.find(key);
          const double w = it == run->ranks[0].steps[s].metrics.end() ? NAN : it->second;
          if (!(v == w || (std::isnan(v) && std::isnan(w))))
            fail(p, "(" + run->name + ") step " + std::to_string(s) + " " + key.first + " [" +
                        key.second + "]: rank " + std::to_string(r.rank) + " has " + num(v) +
                        ", rank 0 " + num(w));
        }
    const auto& steps = run->ranks[0].steps;
    for (std::size_t s = 0; s < steps.size() && s < ref.size(); ++s) {
      for (const auto& [key, want] : ref[s].metrics) {
        auto it = steps[s].metrics.find(key);
        if (it == steps[s].metrics.end()) {
          // Per-layer graphs: sites inside the layer are silent on replay steps.
          if (run->config.graphs == GraphOption::per_layer && s >= 1 &&
              inside_graphed_layer(metric_kind(key.first)))
            continue;
          fail(p, "(" + run->name + ") step " + std::to_string(s) + ": " + key.first + " [" +
                      key.second + "] missing (the single-rank run has it)");
          continue;
        }
        MetricComparison row{run->name, static_cast<std::int64_t>(s), key.first, key.second,
                             it->second, want};
        row.ok = within(it->second, want, tol, &row.abs_err, &row.rel_err);
        ++n;
        err.add(row.abs_err, row.rel_err, key.first, key.second);
        if (!row.ok && row.rel_err > worst_rel) {
          worst_rel = row.rel_err;
          worst_reason = key.first + " [" + key.second + "] step " + std::to_string(s) + " in (" +
                         run->name + "): " + num(row.value) + " vs single-rank " +
                         num(row.reference) + " (abs " + num(row.abs_err) + ", rel " +
                         num(row.rel_err) + " > " + num(tol) + ")";
        }
        if (rows) rows->push_back(row);
      }
      for (const auto& [key, v] : steps[s].metrics)
        if (!ref[s].metrics.count(key))
          fail(p, "(" + run->name + ") step " + std::to_string(s) + ": " + key.first + " [" +
                      key.second + "] has no single-rank counterpart");
    }
  }
  if (!worst_reason.empty()) {
    // The worst value error leads; a disagreement between ranks found earlier follows.
    const std::string earlier = p.status == Status::fail ? "; also: " + p.reason : "";
    p.status = Status::pass;
    fail(p, worst_reason + earlier);
  }
  err.into(p);
  if (p.status == Status::fail && !worst_reason.empty()) {
    p.worst_site = err.site;
    p.worst_label = err.label;
  }
  if (n == 0 && p.status == Status::pass) {
    p.status = Status::skip;
    p.reason = "no metric results to compare (no --metrics)";
    return p;
  }
  if (p.status == Status::pass)
    p.reason = std::to_string(n) + " metric values within " +
               std::string(to_string(single.config.dtype)) + " rel " + num(tol);
  return p;
}

PropertyResult check_graph_replay(const CheckRun& a, const CheckRun& c,
                                  const std::string& alias_failure) {
  PropertyResult p = make("graph_replay", "(" + a.name + ") vs (" + c.name + ")");
  if (!alias_failure.empty()) {
    fail(p, alias_failure);
    return p;
  }
  if (a.config.graphs == GraphOption::none) {
    p.status = Status::skip;
    p.reason = "the scenario has no graphs";
    return p;
  }
  const std::int64_t K = a.config.graph_warmup;
  std::int64_t compared = 0, silent = 0;
  // Per-layer warmup and capture run between steps: a training step never counts them.
  for (const RankRun& r : a.ranks)
    for (const Observation& o : r.trace)
      if (o.step >= 0 && (o.phase == "warmup" ||
                          (o.phase == "capture" && a.config.graphs == GraphOption::per_layer)))
        fail(p, "(" + a.name + ") rank " + std::to_string(r.rank) + " " + o.site + ": a " + o.phase +
                    " observation labelled step " + std::to_string(o.step) +
                    " (graph warmup and capture are not training steps)",
             o.site);
  if (a.config.graphs == GraphOption::per_layer) {
    std::map<std::string, std::string> kinds;
    for (const RankRun& r : a.ranks)
      for (const Observation& o : r.trace) {
        kinds[o.site] = o.kind;
        if (o.step >= 1 && inside_graphed_layer(o.kind))
          fail(p, "(" + a.name + ") rank " + std::to_string(r.rank) + " step " +
                      std::to_string(o.step) + " " + o.site + ": observed in phase " + o.phase +
                      " inside a graphed layer on a replay step",
               o.site);
      }
    const std::int64_t identical = steps_with_identical_weights(a, c);
    compared = compare_observations(a, c, p, [&](const ObsKey& k) {
      return std::get<1>(k) >= 1 && std::get<1>(k) < identical &&
             !inside_graphed_layer(kinds[std::get<3>(k)]);
    });
    if (a.config.steps >= 2 && compared == 0)
      fail(p, "no replay step could be compared bitwise (the gradients of step 0 differ)");
    if (identical < a.config.steps)
      p.note = "steps " + std::to_string(identical) + "+ compared within tolerance only (the "
               "gradients of step " + std::to_string(identical - 1) + " differ by rounding: "
               "replays bypass the scenario's checkpoints); ";
    for (const RankRun& r : c.ranks)
      for (const Observation& o : r.trace)
        if (o.step >= 1 && inside_graphed_layer(o.kind)) ++silent;
    compare_metrics_exact(a, c, p, [](std::int64_t s, const std::string& kind) {
      return s >= 1 && !inside_graphed_layer(kind);
    });
    if (a.config.steps < 2) p.note += "steps < 2: no replay step to compare";
    else
      p.note += std::to_string(compared) + " replay-step observations outside the layers bitwise "
               "equal to eager; " + std::to_string(silent) + " inside observations of eager absent "
               "on replay";
  } else {
    for (const RankRun& r : a.ranks)
      for (const Observation& o : r.trace) {
        if (o.step > K)
          fail(p, "(" + a.name + ") rank " + std::to_string(r.rank) + " step " +
                      std::to_string(o.step) + " " + o.site + ": observed after the capture (phase " +
                      o.phase + ")",
               o.site);
        else if (o.step == K && o.phase != "capture")
          fail(p, "(" + a.name + ") rank " + std::to_string(r.rank) + " step " +
                      std::to_string(o.step) + " " + o.site + ": phase " + o.phase +
                      " in the capture iteration",
               o.site);
      }
    compared = compare_observations(a, c, p, [&](const ObsKey& k) { return std::get<1>(k) < K; });
    for (const RankRun& r : c.ranks)
      for (const Observation& o : r.trace)
        if (o.step > K) ++silent;
    p.note = std::to_string(compared) + " eager-iteration observations bitwise equal to (" + c.name + "); " +
             std::to_string(silent) + " observations of (" + c.name + ") after the capture step absent in (" +
             a.name + ")" + (a.config.steps <= K + 1 ? " (no step after the capture: steps <= graph-warmup + 1)" : "");
  }
  compare_losses(a, c, p, steps_with_identical_weights(a, c), gradient_tolerance(a.config.dtype));
  if (p.status == Status::pass) p.reason = p.note + "; losses equal";
  p.max_abs = 0;
  p.max_rel = 0;
  return p;
}

PropertyResult check_determinism(const CheckRun& a, const CheckRun& again) {
  PropertyResult p = make("determinism", "(" + a.name + ") vs (" + again.name + ")");
  const std::string x = a.results.dump(), y = again.results.dump();
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

PropertyResult check_collective_symmetry(const std::vector<const CheckRun*>& runs) {
  std::string compared;
  for (const CheckRun* r : runs) compared += (compared.empty() ? "" : ", ") + ("(" + r->name + ")");
  PropertyResult p = make("collective_symmetry", compared);
  std::int64_t groups = 0, calls = 0;
  for (const CheckRun* run : runs) {
    std::map<std::pair<std::string, std::vector<int>>, std::pair<int, GroupCalls>> first;
    for (const RankRun& r : run->ranks)
      for (const auto& [axis, g] : r.collectives) {
        auto [it, inserted] = first.try_emplace({axis, g.ranks}, r.rank, g);
        if (inserted) {
          ++groups;
          calls += g.calls;
          continue;
        }
        const GroupCalls& f = it->second.second;
        if (f.calls != g.calls || f.hash != g.hash)
          fail(p, "(" + run->name + ") " + axis + " group: rank " + std::to_string(it->second.first) +
                      " issued " + std::to_string(f.calls) + " collectives (hash " + f.hash +
                      "), rank " + std::to_string(r.rank) + " " + std::to_string(g.calls) +
                      " (hash " + g.hash + ")");
      }
    if (run->ranks.empty() || run->ranks[0].collectives.empty())
      fail(p, "(" + run->name + ") reported no collective hashes");
  }
  if (p.status == Status::pass)
    p.reason = std::to_string(groups) + " groups, every member issued the identical sequence (" +
               std::to_string(calls) + " calls in all, one member each)";
  return p;
}

}  // namespace parity::checks
