// scenarios/fault_shapes.h: a shaped MoE scenario is a valid run that takes the
// fault's code path, or the case is declined.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "harness/checks/check.h"
#include "harness/graphs/graph_scope.h"
#include "scenarios/fault_shapes.h"
#include "scenarios/generators.h"

namespace parity {
namespace {

bool checkpoints_router(const RunConfig& c) {
  return c.recompute.rfind("full-", 0) == 0 || c.recompute.find("moe") != std::string::npos;
}

bool logs_a_loss(const RunConfig& c) {
  return c.moe_per_layer_logging && (c.moe_aux_loss > 0 || c.moe_z_loss > 0);
}

RC_GTEST_PROP(FaultShapes, ShapedMoeScenariosAreValidAndTakeTheFaultsPath, ()) {
  const RunConfig generated = *scenarios::gen_moe_scenario();
  for (CodePathFault f :
       {CodePathFault::recompute_rng_not_restored, CodePathFault::warmup_counted_as_step,
        CodePathFault::observe_forced_logits, CodePathFault::expert_skip_empty_rank,
        CodePathFault::aux_loss_tracked_on_recompute, CodePathFault::expert_load_count_ungated,
        CodePathFault::aux_loss_tracker_host_side, CodePathFault::router_stats_include_padding}) {
    RunConfig c = generated;
    if (!scenarios::shape_for_fault(c, f)) continue;
    RC_ASSERT(checks::validate_check_scenario(c).empty());
    switch (f) {
      case CodePathFault::recompute_rng_not_restored:
        RC_ASSERT(c.dropout > 0);
        RC_ASSERT(c.recompute.rfind("full-", 0) == 0);
        break;
      case CodePathFault::warmup_counted_as_step:
        RC_ASSERT(c.graphs == GraphOption::per_layer);
        RC_ASSERT(c.graph_warmup >= 1);
        RC_ASSERT(c.steps >= 2);
        break;
      case CodePathFault::observe_forced_logits:
        RC_ASSERT(c.moe_force_routing != ForceRoutingOption::none);
        break;
      case CodePathFault::expert_skip_empty_rank:
        RC_ASSERT(c.ep == 2);
        RC_ASSERT(c.moe_force_routing == ForceRoutingOption::biased);
        RC_ASSERT(c.moe_topk <= c.moe_experts / 2);
        break;
      case CodePathFault::aux_loss_tracked_on_recompute:
        RC_ASSERT(logs_a_loss(c));
        RC_ASSERT(checkpoints_router(c));
        break;
      case CodePathFault::expert_load_count_ungated:
        RC_ASSERT(c.moe_per_layer_logging);
        RC_ASSERT(checkpoints_router(c));
        break;
      case CodePathFault::aux_loss_tracker_host_side:
        RC_ASSERT(logs_a_loss(c));
        RC_ASSERT(c.graphs != GraphOption::none);
        if (c.graphs == GraphOption::per_layer) {
          RC_ASSERT(parse_graph_scope(c.graph_scope, nullptr)->captures_router());
          RC_ASSERT(c.steps >= 2);
        } else {
          RC_ASSERT(c.steps >= c.graph_warmup + 2);
        }
        break;
      default:
        RC_ASSERT(c.moe_per_layer_logging);
        RC_ASSERT(c.padding_fraction > 0);
    }
  }
}

// A fault without a shape leaves the scenario as generated.
TEST(FaultShapes, OtherFaultsLeaveTheScenarioAlone) {
  RunConfig c;
  c.moe_experts = 4;
  const std::string before = to_json(c).dump();
  EXPECT_TRUE(scenarios::shape_for_fault(c, CodePathFault::sqrt_before_sum));
  EXPECT_EQ(to_json(c).dump(), before);
}

// A layout that cannot hold EP 2 cannot show an empty expert rank.
TEST(FaultShapes, DeclinesWhatCannotShowTheFault) {
  RunConfig c;
  c.moe_experts = 4;
  c.dp = 1;
  c.cp = 1;
  EXPECT_FALSE(scenarios::shape_for_fault(c, CodePathFault::expert_skip_empty_rank));
  RunConfig full;
  full.moe_experts = 4;
  full.recompute = "full-uniform";
  full.graphs = GraphOption::none;
  EXPECT_FALSE(scenarios::shape_for_fault(full, CodePathFault::aux_loss_tracker_host_side));
}

}  // namespace
}  // namespace parity
