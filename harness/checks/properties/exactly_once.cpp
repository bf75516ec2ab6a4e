// exactly_once: each site is notified once per microbatch per rank per logical
// forward, in the phases of contract.md section 3 and no others, in the
// reference's order; and what the residual helper hands observers is what
// section 1 says (a contribution without autograd, in a fresh tensor).
#include <map>
#include <tuple>

#include "harness/checks/properties/common.h"

namespace parity::checks {

using namespace detail;

namespace {

// Whether `site` is observed in an eager/record phase at `step` of a run with
// config `c` (per-layer graphs silence their captured stages on replay steps;
// full-iteration graphs observe eagerly only before the capture).
bool observed_in_counting_phase(const RunConfig& c, const std::string& site, std::int64_t step) {
  switch (c.graphs) {
    case GraphMode::none:
      return true;
    case GraphMode::per_layer:
      return step == 0 || !captured_by_layer_graphs(c, site);
    case GraphMode::full_iteration:
      return step < c.graph_warmup;
  }
  return true;
}

// The run of `runs` that (run) is ordered against: same sharding and shape, no
// recompute, no graphs (the last such: (c) rather than a single-rank (b));
// null when (run) is such a run itself or none exists.
const CheckRun* order_reference(const CheckRun& run, const std::vector<const CheckRun*>& runs) {
  const RunConfig& a = run.config;
  if (a.recompute == "none" && a.graphs == GraphMode::none) return nullptr;
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    const CheckRun* r = *it;
    const RunConfig& c = r->config;
    if (r == &run || c.recompute != "none" || c.graphs != GraphMode::none) continue;
    if (c.tp == a.tp && c.cp == a.cp && c.dp == a.dp && c.sp == a.sp && c.layers == a.layers &&
        c.steps == a.steps && c.microbatches == a.microbatches &&
        r->ranks.size() == run.ranks.size())
      return r;
  }
  return nullptr;
}

// Per rank, step and microbatch: (run)'s eager/record observations against the
// reference's, position by position (the site order; the grad mode too when
// (run) has no recompute). Returns the sequences compared.
std::int64_t compare_observation_order(const CheckRun& run, const CheckRun& ref,
                                       PropertyResult& p) {
  using Key = std::tuple<int, std::int64_t, std::int64_t>;  // rank, step, microbatch
  const bool same_grad_mode = run.config.recompute == "none";
  std::map<Key, std::vector<const Observation*>> got, want;
  for (const RankRun& r : run.ranks)
    for (const Observation& o : r.trace)
      if (counting_phase(o.phase) && o.step >= 0) got[{o.rank, o.step, o.microbatch}].push_back(&o);
  for (const RankRun& r : ref.ranks)
    for (const Observation& o : r.trace)
      if (counting_phase(o.phase) && o.step >= 0 &&
          observed_in_counting_phase(run.config, o.site, o.step))
        want[{o.rank, o.step, o.microbatch}].push_back(&o);
  auto text = [](const Observation* o) {
    return o == nullptr
               ? std::string("nothing")
               : o->site + " (" + o->phase + ", grad " + (o->grad_mode ? "on" : "off") + ")";
  };
  std::int64_t compared = 0;
  for (const auto& [key, expected] : want) {
    const std::vector<const Observation*>& seen = got[key];
    ++compared;
    for (std::size_t i = 0; i < std::max(seen.size(), expected.size()); ++i) {
      const Observation* x = i < seen.size() ? seen[i] : nullptr;
      const Observation* y = i < expected.size() ? expected[i] : nullptr;
      if (x && y && x->site == y->site && (!same_grad_mode || x->grad_mode == y->grad_mode))
        continue;
      const auto& [rank, step, mb] = key;
      fail(p,
           "(" + run.name + ") rank " + std::to_string(rank) + " step " + std::to_string(step) +
               " microbatch " + std::to_string(mb) + ": observation #" + std::to_string(i) +
               " is " + text(x) + ", the reference (" + ref.name + ") observes " + text(y) +
               " there (forward order" + (same_grad_mode ? " and grad mode" : "") + ")",
           x ? x->site : y->site);
      break;
    }
  }
  return compared;
}

// contract.md section 1: the contribution is computed without autograd into a
// fresh tensor. Metrics detach their input, so only the trace's per-record
// flags show a contribution that joined the graph or aliases the accumulator.
std::int64_t check_residual_contributions(const CheckRun& run, PropertyResult& p) {
  std::int64_t checked = 0;
  for (const RankRun& r : run.ranks)
    for (const Observation& o : r.trace) {
      if (o.kind != "residual_contribution") continue;
      ++checked;
      const std::string at = "(" + run.name + ") rank " + std::to_string(r.rank) + " step " +
                             std::to_string(o.step) + " microbatch " +
                             std::to_string(o.microbatch) + " " + o.site + " (" + o.phase + ")";
      if (o.requires_grad)
        fail(p,
             at + ": the residual contribution handed to observers requires grad (it was "
                  "computed with autograd on; contract.md section 1: without autograd)",
             o.site);
      if (o.aliases_accumulator)
        fail(p,
             at + ": the residual contribution shares storage with the accumulator observed "
                  "just before it (contract.md section 1: a fresh tensor)",
             o.site);
    }
  return checked;
}

}  // namespace

PropertyResult check_exactly_once(const std::vector<const CheckRun*>& runs) {
  PropertyResult p = make("exactly_once", run_list(runs));
  std::int64_t checked = 0, contributions = 0;
  for (const CheckRun* run : runs) {
    const RunConfig& c = run->config;
    contributions += check_residual_contributions(*run, p);
    for (const RankRun& r : run->ranks) {
      const std::size_t expected_sites = expected_site_count(c, r.parameter_tp.size(), r.stage);
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
                    std::to_string(expected_sites) + " (" + site_count_rule(c) + ")");
        continue;
      }
      const std::int64_t K = c.graph_warmup;
      for (const auto& [site, kind] : sites) {
        const bool inside = captured_by_layer_graphs(c, site);
        if (c.graphs == GraphMode::per_layer && inside) {
          if (K > 0) want[{-1, -1, site, "warmup"}] = static_cast<int>(K);
          want[{-1, -1, site, "capture"}] = 1;
        }
        for (std::int64_t s = 0; s < c.steps; ++s)
          for (std::int64_t m = 0; m < c.microbatches; ++m) {
            switch (c.graphs) {
              case GraphMode::none:
                want[{s, m, site, "eager"}] = 1;
                break;
              case GraphMode::per_layer:
                if (!inside)
                  want[{s, m, site, "eager"}] = 1;
                else if (s == 0)
                  want[{s, m, site, "record"}] = 1;
                break;
              case GraphMode::full_iteration:
                if (s < K)
                  want[{s, m, site, "eager"}] = 1;
                else if (s == K)
                  want[{s, m, site, "capture"}] = 1;
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
      ordered_runs +=
          (ordered_runs.empty() ? "" : ", ") + ("(" + run->name + ") vs (" + ref->name + ")");
    }
  if (p.status == Status::pass) {
    p.reason = std::to_string(checked) + " (rank, step, microbatch, site, phase) expectations met";
    if (!ordered_runs.empty())
      p.reason += "; " + std::to_string(ordered) +
                  " (rank, step, microbatch) sequences in forward order, " + ordered_runs;
    p.reason += "; " + std::to_string(contributions) +
                " residual contributions without autograd, in a fresh tensor";
  }
  return p;
}

namespace {
class ExactlyOnce final : public Property {
 public:
  std::string_view name() const override { return "exactly_once"; }
  std::string_view doc() const override {
    return "every site observed as often as the graph phases say, in the reference's order and "
           "grad mode; residual contributions without autograd";
  }
  std::string_view needs() const override { return "nothing: every run compares"; }
  std::vector<RunVariant> runs_needed(const RunConfig&) const override {
    return {variant::single_rank, variant::eager_without_recompute};
  }
  PropertyResult evaluate(const CheckRuns& runs, std::vector<MetricComparison>*) const override {
    return check_exactly_once({&runs.at(variant::scenario), &runs.at(variant::single_rank),
                               &runs.at(variant::eager_without_recompute)});
  }
};
}  // namespace

PARITY_REGISTER_PROPERTY(ExactlyOnce, 1)

}  // namespace parity::checks
