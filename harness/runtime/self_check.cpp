#include "harness/runtime/self_check.h"

#include <cstdio>
#include <sstream>

#include <ATen/ATen.h>

#include "harness/parallel/all_to_all.h"
#include "harness/parallel/communicator.h"
#include "harness/parallel/point_to_point.h"
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
  blocks.reserve(members.size());
  for (int m : members) blocks.push_back(block(m));
  c.expect_equal(g.all_gather(block(ctx.rank), 0), at::cat(blocks, 0), "all_gather on " + name);
  // ... and along dim 1.
  c.expect_equal(g.all_gather(block(ctx.rank), 1), at::cat(blocks, 1),
                 "all_gather(dim 1) on " + name);

  // reduce_scatter(sum): element j = j + rank; this rank keeps chunk `me`.
  const at::Tensor ramp = at::arange(2 * n, at::kFloat);
  int member_sum = 0;
  for (int m : members) member_sum += m;
  const at::Tensor want_rs = (ramp * static_cast<float>(n) + static_cast<float>(member_sum))
                                 .narrow(0, 2 * static_cast<std::int64_t>(me), 2);
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

// Point-to-point on the pipeline ring, as the schedules use it: in one batch
// each stage sends 100 * rank + [0, 3) to the next stage (channel 0, the
// activations') and 100 * rank + [10, 13) to the previous one (channel 1, the
// gradients'), and receives what its neighbours sent.
void check_point_to_point(RankContext& ctx, Checker& c) {
  Communicator& g = ctx.group(Axis::pp);
  const int n = g.size(), me = g.rank();
  const int next = (me + 1) % n, prev = (me - 1 + n) % n;
  const std::vector<int>& ranks = g.global_ranks();
  auto payload = [&](int group_rank, float offset) {
    return at::arange(3, at::kFloat) + offset +
           100.0f * static_cast<float>(ranks[static_cast<std::size_t>(group_rank)]);
  };
  auto id = [&](int from, int to) { return static_cast<std::int64_t>(from) * n + to; };
  const at::Tensor like = at::empty({3}, at::kFloat);
  const std::vector<at::Tensor> got = g.exchange({
      PointToPointOp::send(next, payload(me, 0), id(me, next), "to the next stage", 0),
      PointToPointOp::send(prev, payload(me, 10), id(me, prev), "to the previous stage", 1),
      PointToPointOp::recv(prev, like, id(prev, me), "from the previous stage", 0),
      PointToPointOp::recv(next, like, id(next, me), "from the next stage", 1),
  });
  c.expect(got.size() == 2,
           "point-to-point on pp: " + std::to_string(got.size()) + " received tensors, expected 2");
  if (got.size() != 2) return;
  c.expect_equal(got[0], payload(prev, 0), "point-to-point on pp: from the previous stage");
  c.expect_equal(got[1], payload(next, 10), "point-to-point on pp: from the next stage");
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
  const bool pipelined = ctx.topology.pp() > 1;
  if (pipelined) {
    check_axis(ctx, Axis::pp, c);
    check_point_to_point(ctx, c);
  }

  nlohmann::json groups;
  std::int64_t collectives = 0;
  for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::world, Axis::ep, Axis::pp}) {
    if (axis == Axis::ep && !expert_parallel) continue;
    if (axis == Axis::pp && !pipelined) continue;
    groups[std::string(to_string(axis))] = ctx.group(axis).global_ranks();
    collectives += ctx.group(axis).calls_issued();
  }
  nlohmann::json coordinates = {
      {"tp", ctx.coordinates.tp}, {"cp", ctx.coordinates.cp}, {"dp", ctx.coordinates.dp}};
  if (pipelined) coordinates["pp"] = ctx.coordinates.pp;
  return {{"rank", ctx.rank},        {"coordinates", coordinates}, {"groups", groups},
          {"checks", c.checks},      {"failures", c.failures},     {"collectives", collectives},
          {"ok", c.failures.empty()}};
}

bool self_check_passed(const LaunchResult& result) {
  if (!result.ok()) return false;
  for (const nlohmann::json& r : result.results)
    if (!r.is_object() || !r.value("ok", false)) return false;
  return true;
}

std::string format_self_check_table(const LaunchResult& result) {
  // The pp columns only when the ranks report a pipeline stage.
  bool pipelined = false;
  for (const nlohmann::json& j : result.results)
    pipelined = pipelined || (j.is_object() && j["coordinates"].contains("pp"));
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "%4s %3s %3s %3s%s  %-12s %-12s %-12s%s %6s %6s  %s\n", "rank",
                "tp", "cp", "dp", pipelined ? "  pp" : "", "tp group", "cp group", "dp group",
                pipelined ? " pp group    " : "", "colls", "checks", "result");
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
    char stage[16] = "", stage_group[24] = "";
    if (pipelined) {
      std::snprintf(stage, sizeof stage, " %3d", co.value("pp", 0));
      std::snprintf(stage_group, sizeof stage_group, " %-12s", group("pp").c_str());
    }
    std::snprintf(line, sizeof line, "%4zu %3d %3d %3d%s  %-12s %-12s %-12s%s %6lld %6d  %s\n", r,
                  co["tp"].get<int>(), co["cp"].get<int>(), co["dp"].get<int>(), stage,
                  group("tp").c_str(), group("cp").c_str(), group("dp").c_str(), stage_group,
                  static_cast<long long>(j.value("collectives", 0LL)), j["checks"].get<int>(),
                  failures ? ("FAILED (" + std::to_string(failures) + ")").c_str() : "ok");
    out += line;
    for (const auto& f : j["failures"]) out += "       " + f.get<std::string>() + "\n";
  }
  return out;
}

}  // namespace parity
