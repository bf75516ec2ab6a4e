#include "harness/trace/trace_diff.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

namespace parity {

namespace {

using GroupKey = std::tuple<int, std::int64_t, std::int64_t, std::string, std::string>;

GroupKey key_of(const TraceRecord& r) {
  return {r.rank, r.step, r.microbatch, r.site, std::string(graph_phase_name(r.phase))};
}

std::string describe(const GroupKey& k) {
  return std::get<3>(k) + " (rank " + std::to_string(std::get<0>(k)) + ", step " +
         std::to_string(std::get<1>(k)) + ", microbatch " + std::to_string(std::get<2>(k)) +
         ", phase " + std::get<4>(k) + ")";
}

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Groups {
  std::map<GroupKey, std::vector<const TraceLine*>> by_key;
  std::vector<GroupKey> order;  // first appearance
};

Groups group(const std::vector<TraceLine>& lines, const std::vector<std::string>& kinds) {
  Groups g;
  for (const TraceLine& l : lines) {
    if (!kinds.empty() &&
        std::find(kinds.begin(), kinds.end(), to_string(l.record.kind)) == kinds.end())
      continue;
    const GroupKey k = key_of(l.record);
    auto& v = g.by_key[k];
    if (v.empty()) g.order.push_back(k);
    v.push_back(&l);
  }
  // A rank's records in its notification order.
  for (auto& [k, v] : g.by_key)
    std::stable_sort(v.begin(), v.end(), [](const TraceLine* x, const TraceLine* y) {
      return x->record.seq < y->record.seq;
    });
  return g;
}

// The first difference between two records of one group; "" when they agree.
std::string compare_records(const TraceLine& x, const std::string& a_name, const TraceLine& y,
                            const std::string& b_name, const TraceDiffOptions& o) {
  const TraceRecord &p = x.record, &q = y.record;
  const std::string at = " (" + a_name + ":" + std::to_string(x.line) + " vs " + b_name + ":" +
                         std::to_string(y.line) + ")";
  if (p.shape != q.shape) return "shape " + shape_text(p.shape) + " vs " + shape_text(q.shape) + at;
  if (p.dtype != q.dtype) return "dtype " + p.dtype + " vs " + q.dtype + at;
  if (p.summary.nan != q.summary.nan)
    return "nan count " + std::to_string(p.summary.nan) + " vs " + std::to_string(q.summary.nan) +
           at;
  if (p.summary.inf != q.summary.inf)
    return "inf count " + std::to_string(p.summary.inf) + " vs " + std::to_string(q.summary.inf) +
           at;
  const std::pair<const char*, std::pair<std::optional<double>, std::optional<double>>> stats[] = {
      {"sum", {p.summary.sum, q.summary.sum}},
      {"sum_sq", {p.summary.sum_sq, q.summary.sum_sq}},
      {"min", {p.summary.min, q.summary.min}},
      {"max", {p.summary.max, q.summary.max}},
  };
  for (const auto& [name, values] : stats) {
    const auto& [u, v] = values;
    if (!u || !v) {
      if (u.has_value() != v.has_value())
        return std::string(name) + " " + (u ? num(*u) : "null") + " vs " + (v ? num(*v) : "null") +
               at;
      continue;
    }
    double rel = 0;
    std::string rule;
    if (!o.close(p.dtype, *u, *v, &rel, &rule))
      return std::string(name) + " " + num(*u) + " vs " + num(*v) + " (rel " + num(rel) + " > " +
             rule + ")" + at;
  }
  return "";
}

}  // namespace

TraceDiffResult diff_traces(const std::vector<TraceLine>& a, const std::string& a_name,
                            const std::vector<TraceLine>& b, const std::string& b_name,
                            const TraceDiffOptions& options) {
  TraceDiffResult result;
  const Groups ga = group(a, options.kinds), gb = group(b, options.kinds);
  auto diverge = [&](const GroupKey& k, const std::string& what) {
    if (!result.equal) return;  // keep the first
    result.equal = false;
    result.first_divergence = describe(k) + ": " + what;
  };
  for (const GroupKey& k : ga.order) {
    const auto& xs = ga.by_key.at(k);
    auto it = gb.by_key.find(k);
    const std::size_t ny = it == gb.by_key.end() ? 0 : it->second.size();
    if (xs.size() != ny) {
      diverge(k, std::to_string(xs.size()) + " record(s) in " + a_name + " (first at line " +
                     std::to_string(xs.front()->line) + "), " + std::to_string(ny) + " in " +
                     b_name);
      continue;
    }
    for (std::size_t i = 0; i < xs.size(); ++i) {
      ++result.compared;
      const std::string d = compare_records(*xs[i], a_name, *it->second[i], b_name, options);
      if (!d.empty()) diverge(k, d);
    }
  }
  for (const GroupKey& k : gb.order)
    if (!ga.by_key.count(k))
      diverge(k, "0 record(s) in " + a_name + ", " + std::to_string(gb.by_key.at(k).size()) +
                     " in " + b_name + " (first at line " +
                     std::to_string(gb.by_key.at(k).front()->line) + ")");
  return result;
}

}  // namespace parity
