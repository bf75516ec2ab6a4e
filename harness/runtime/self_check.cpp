#include "harness/runtime/self_check.h"

#include <cstdio>
#include <sstream>

#include <ATen/ATen.h>

#include "harness/parallel/all_to_all.h"
#include "harness/parallel/communicator.h"
#include "harness/runtime/launcher.h"

namespace parity {
namespace {

std::string list(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

struct Checker {
  int checks = 0;
  nlohmann::json failures = nlohmann::json::array();
  void expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok) failures.push_back(what);
  }
  void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    const bool ok = got.defined() && got.sizes() == want.sizes() &&
                    got.scalar_type() == want.scalar_type() && at::equal(got, want);
    expect(ok, what + ": got " + (got.defined() ? describe(got) : "undefined") + ", expected " +
                   describe(want));
  }
  static std::string describe(const at::Tensor& t) {
    std::ostringstream os;
    os << at::toString(t.scalar_type()) << t.sizes();
    if (t.numel() <= 8) {
      os << " {";
      at::Tensor flat = t.to(at::kDouble).reshape({-1});
      for (std::int64_t i = 0; i < flat.numel(); ++i)
        os << (i ? ", " : "") << flat[i].item<double>();
      os << "}";
    }
    return os.str();
  }
};

void check_axis(RankContext& ctx, Axis axis, Checker& c) {
  Communicator& g = ctx.group(axis);
  const std::string name(to_string(axis));
  const std::vector<int> members = ctx.topology.group_ranks(ctx.rank, axis);
  const int n = static_cast<int>(members.size());
  const int me = ctx.topology.coordinate(ctx.rank, axis);

  // Membership.
  c.expect(g.global_ranks() == members,
           name + " group is " + list(g.global_ranks()) + ", expected " + list(members));
  c.expect(g.size() == n && g.rank() == me, name + " group: rank " + std::to_string(g.rank()) +
                                                " of " + std::to_string(g.size()) + ", expected " +
                                                std::to_string(me) + " of " + std::to_string(n));

  // all_reduce: (rank + 1) * [1, 2, 3, 4].
  const at::Tensor base = at::arange(1, 5, at::kFloat);
  const at::Tensor mine = base * static_cast<float>(ctx.rank + 1);
  int sum = 0, mx = 0, mn = 1 << 30;
  for (int m : members) {
    sum += m + 1;
    mx = std::max(mx, m + 1);
    mn = std::min(mn, m + 1);
  }
  c.expect_equal(g.all_reduce(mine, ReduceOp::sum), base * static_cast<float>(sum),
                 "all_reduce(sum) on " + name);
  c.expect_equal(g.all_reduce(mine, ReduceOp::max), base * static_cast<float>(mx),
                 "all_reduce(max) on " + name);
  c.expect_equal(g.all_reduce(mine, ReduceOp::min), base * static_cast<float>(mn),
                 "all_reduce(min) on " + name);

  // all_gather along dim 0: rank*100 + [[0,1,2],[3,4,5]], in group order.
  auto block = [](int r) {
    return at::arange(6, at::kDouble).reshape({2, 3}) + static_cast<double>(r) * 100.0;
  };
  std::vector<at::Tensor> blocks;
  for (int m : members) blocks.push_back(block(m));
  c.expect_equal(g.all_gather(block(ctx.rank), 0), at::cat(blocks, 0), "all_gather on " + name);
  // ... and along dim 1.
  c.expect_equal(g.all_gather(block(ctx.rank), 1), at::cat(blocks, 1),
                 "all_gather(dim 1) on " + name);

  // reduce_scatter(sum): element j = j + rank; this rank keeps chunk `me`.
  const at::Tensor ramp = at::arange(2 * n, at::kFloat);
  int member_sum = 0;
  for (int m : members) member_sum += m;
  const at::Tensor want_rs =
      (ramp * static_cast<float>(n) + static_cast<float>(member_sum)).narrow(0, 2 * me, 2);
  c.expect_equal(g.reduce_scatter(ramp + static_cast<float>(ctx.rank), 0, ReduceOp::sum), want_rs,
                 "reduce_scatter(sum) on " + name);

  // broadcast from group rank 0.
  const at::Tensor bc = at::full({3}, static_cast<float>(ctx.rank) + 0.5f, at::kFloat);
  c.expect_equal(g.broadcast(bc, 0),
                 at::full({3}, static_cast<float>(members[0]) + 0.5f, at::kFloat),
                 "broadcast on " + name);

  g.barrier();
  c.expect(true, "barrier on " + name);
}

// The uneven all-to-all on `axis`: group rank s sends (s + 2d) % 3 rows to
// group rank d (so some pairs send nothing), row i of them holding
// 1000*s + 10*d + i in both columns.
void check_all_to_all(RankContext& ctx, Axis axis, Checker& c) {
  Communicator& g = ctx.group(axis);
  const int n = g.size();
  auto rows = [](int s, int d) { return static_cast<std::int64_t>((s + 2 * d) % 3); };
  auto block = [&](int s, int d) {
    return (at::arange(rows(s, d), at::kFloat) + static_cast<float>(1000 * s + 10 * d))
        .unsqueeze(1)
        .repeat({1, 2});
  };
  std::vector<std::int64_t> send;
  std::vector<at::Tensor> mine, want;
  std::vector<std::int64_t> want_counts;
  for (int d = 0; d < n; ++d) {
    send.push_back(rows(g.rank(), d));
    mine.push_back(block(g.rank(), d));
  }
  for (int s = 0; s < n; ++s) {
    want_counts.push_back(rows(s, g.rank()));
    want.push_back(block(s, g.rank()));
  }
  const AllToAllResult got = g.all_to_all(at::cat(mine, 0), send);
  const std::string name(to_string(axis));
  c.expect_equal(got.output, at::cat(want, 0), "all_to_all on " + name);
  c.expect(got.recv_counts == want_counts, "all_to_all on " + name + ": receive counts");
}

}  // namespace

nlohmann::json run_self_check(RankContext& ctx) {
  Checker c;
  check_axis(ctx, Axis::world, c);
  check_axis(ctx, Axis::tp, c);
  ctx.fault_point("self-check midway");
  check_axis(ctx, Axis::cp, c);
  check_axis(ctx, Axis::dp, c);
  const bool expert_parallel = ctx.topology.ep() > 1;
  if (expert_parallel) {
    check_axis(ctx, Axis::ep, c);
    check_all_to_all(ctx, Axis::ep, c);
  }

  nlohmann::json groups;
  std::int64_t collectives = 0;
  for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::world, Axis::ep}) {
    if (axis == Axis::ep && !expert_parallel) continue;
    groups[std::string(to_string(axis))] = ctx.group(axis).global_ranks();
    collectives += ctx.group(axis).calls_issued();
  }
  return {{"rank", ctx.rank},
          {"coordinates",
           {{"tp", ctx.coordinates.tp}, {"cp", ctx.coordinates.cp}, {"dp", ctx.coordinates.dp}}},
          {"groups", groups},
          {"checks", c.checks},
          {"failures", c.failures},
          {"collectives", collectives},
          {"ok", c.failures.empty()}};
}

bool self_check_passed(const LaunchResult& result) {
  if (!result.ok()) return false;
  for (const nlohmann::json& r : result.results)
    if (!r.is_object() || !r.value("ok", false)) return false;
  return true;
}

std::string format_self_check_table(const LaunchResult& result) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%4s %3s %3s %3s  %-12s %-12s %-12s %6s %6s  %s\n", "rank", "tp",
                "cp", "dp", "tp group", "cp group", "dp group", "colls", "checks", "result");
  out += line;
  for (std::size_t r = 0; r < result.results.size(); ++r) {
    const nlohmann::json& j = result.results[r];
    if (!j.is_object()) {
      std::snprintf(line, sizeof line, "%4zu  (no result)\n", r);
      out += line;
      continue;
    }
    auto group = [&](const char* axis) { return list(j["groups"][axis].get<std::vector<int>>()); };
    const nlohmann::json& co = j["coordinates"];
    const int failures = static_cast<int>(j["failures"].size());
    std::snprintf(line, sizeof line, "%4zu %3d %3d %3d  %-12s %-12s %-12s %6lld %6d  %s\n", r,
                  co["tp"].get<int>(), co["cp"].get<int>(), co["dp"].get<int>(),
                  group("tp").c_str(), group("cp").c_str(), group("dp").c_str(),
                  static_cast<long long>(j.value("collectives", 0LL)), j["checks"].get<int>(),
                  failures ? ("FAILED (" + std::to_string(failures) + ")").c_str() : "ok");
    out += line;
    for (const auto& f : j["failures"]) out += "       " + f.get<std::string>() + "\n";
  }
  return out;
}

}  // namespace parity
