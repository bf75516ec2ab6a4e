// The generators produce idle ranks (scenarios/generators.h pick_idle_ranks):
// an EP rank that receives no token, experts no token reaches, CP ranks and
// (under SP) TP ranks whose tokens are all padding, each with a reduction over
// its axis; and every MoE scenario exchanges collective fingerprints.
// Idleness is worked out here from the layout with the model's own CP
// positions, not read from the generator's choices.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "harness/checks/check.h"
#include "harness/model/gpt_model.h"
#include "scenarios/generators.h"
#include "scenarios/quiet_listener.h"

namespace parity {
namespace {

struct Idle {
  bool ep_rank = false;  // an EP rank owns no expert a token is routed to
  bool expert = false;   // an expert no token is routed to
  bool cp_rank = false;  // a CP rank whose tokens are all padding
  bool tp_rank = false;  // under SP, a TP rank of padding beside one with valid tokens
};

Idle idle_of(const RunConfig& c) {
  Idle out;
  if (c.moe_experts < 2) return out;
  if (c.moe_force_routing == ForcedRouting::biased) {
    // Every token prefers experts 0..k-1 (the router's forcing bias).
    out.expert = c.moe_topk < c.moe_experts;
    out.ep_rank = c.ep > 1 && c.moe_topk <= c.moe_experts / c.ep;  // EP rank 0 owns 0..E/ep-1
  }
  const auto padding = static_cast<std::int64_t>(std::llround(c.padding_fraction * c.seq));
  if (padding == 0) return out;
  const int tp = c.sp ? c.tp : 1;  // the router's rows are split over tp under SP only
  for (int cp_rank = 0; cp_rank < c.cp; ++cp_rank) {
    const at::Tensor positions = context_parallel_positions(c.seq, c.cp, cp_rank);
    int valid_tp_ranks = 0;
    for (int tp_rank = 0; tp_rank < tp; ++tp_rank)
      if ((positions.chunk(tp, 0)[tp_rank] < c.seq - padding).any().item<bool>()) ++valid_tp_ranks;
    out.cp_rank = out.cp_rank || valid_tp_ranks == 0;
    out.tp_rank = out.tp_rank || (valid_tp_ranks > 0 && valid_tp_ranks < tp);
  }
  return out;
}

bool has(const RunConfig& c, const std::string& metric) {
  return std::find(c.metrics.begin(), c.metrics.end(), metric) != c.metrics.end();
}

bool has_router_metric(const RunConfig& c) {
  for (const std::string& m : scenarios::router_metric_names())
    if (has(c, m)) return true;
  return false;
}

TEST(ScenarioGenerators, ProduceIdleRanksOnEveryAxisWithTheReductionsOverIt) {
  std::map<std::string, int> seen;
  int scenarios = 0, without_fingerprints = 0;  // MoE scenarios without them
  rc::detail::TestParams params;
  params.seed = 20261205;
  params.maxSuccess = 2000;
  params.disableShrinking = true;
  rc::detail::TestMetadata metadata;
  metadata.id = "ScenarioGenerators/idle-ranks";
  scenarios::QuietListener quiet;
  rc::detail::checkProperty(
      rc::detail::toProperty([&] {
        const RunConfig c = *scenarios::gen_scenario();
        ++scenarios;
        if (c.moe_experts > 0 && !c.check_collectives) ++without_fingerprints;
        const Idle idle = idle_of(c);
        // The EP sum of the gradient norm; the tracker's tp, cp and dp sums
        // and the router metrics' reductions over the sequence's ranks.
        if (idle.ep_rank && has(c, "global-wgrad-l2")) ++seen["EP rank, gradient norm"];
        if (idle.expert && (has(c, "global-wgrad-l2") || c.moe_per_layer_logging))
          ++seen["expert, norm or tracker"];
        if (idle.cp_rank && c.moe_per_layer_logging) ++seen["CP rank, tracker"];
        if (idle.cp_rank && has_router_metric(c)) ++seen["CP rank, router metric"];
        if (idle.tp_rank && c.moe_per_layer_logging) ++seen["SP TP rank, tracker"];
        if (idle.tp_rank && has_router_metric(c)) ++seen["SP TP rank, router metric"];
      }),
      metadata, params, quiet);
  EXPECT_EQ(without_fingerprints, 0);
  for (const char* kind :
       {"EP rank, gradient norm", "expert, norm or tracker", "CP rank, tracker",
        "CP rank, router metric", "SP TP rank, tracker", "SP TP rank, router metric"})
    EXPECT_GT(seen[kind], 0) << "never generated: idle " << kind;
  // The property suite checks 40 scenarios: about one in 20 with an idle EP
  // rank or idle sequence ranks keeps a few of them in every run.
  const int sequence = seen["CP rank, tracker"] + seen["SP TP rank, tracker"];
  EXPECT_GE(seen["EP rank, gradient norm"] + sequence, scenarios / 20)
      << ::testing::PrintToString(seen) << " of " << scenarios;
  ::testing::Test::RecordProperty("idle", ::testing::PrintToString(seen));
}

// pick_idle_ranks keeps what it makes valid, and the helpers decline layouts
// that cannot hold an idle rank.
TEST(ScenarioGenerators, IdleRankHelpersDeclineLayoutsWithoutRoomForOne) {
  RunConfig c;
  c.tp = 1;
  c.cp = 1;
  c.dp = 1;
  c.sp = false;
  c.moe_experts = 4;
  EXPECT_FALSE(scenarios::make_idle_ep_rank(c));  // cp x dp = 1: no EP
  EXPECT_FALSE(scenarios::make_idle_sequence_ranks(c));
  EXPECT_EQ(c.padding_fraction, 0.0);
  EXPECT_TRUE(scenarios::make_idle_experts(c));
  EXPECT_TRUE(idle_of(c).expert);
  c.cp = 2;
  c.seq = 8;
  ASSERT_TRUE(scenarios::make_idle_sequence_ranks(c));
  EXPECT_EQ(c.padding_fraction, 0.75);
  EXPECT_TRUE(idle_of(c).cp_rank);
  ASSERT_TRUE(scenarios::make_idle_ep_rank(c));
  EXPECT_EQ(c.ep, 2);
  EXPECT_TRUE(idle_of(c).ep_rank);
}

}  // namespace
}  // namespace parity
