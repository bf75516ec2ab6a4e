// scenarios/fault_shapes.h: a shaped MoE scenario is a valid run that takes the
// fault's code path, or the case is declined.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <set>

#include "harness/checks/check.h"
#include "harness/config/model_mapping.h"
#include "harness/config/resume_layout.h"
#include "harness/graphs/graph_scope.h"
#include "harness/model/pipeline_layout.h"
#include "harness/model/sequence_packing.h"
#include "scenarios/fault_shapes.h"
#include "scenarios/generators.h"

PARITY_USES_FAULT(aux_loss_tracked_on_recompute);
PARITY_USES_FAULT(aux_loss_tracker_host_side);
PARITY_USES_FAULT(collective_skipped_when_zero);
PARITY_USES_FAULT(expert_load_count_ungated);
PARITY_USES_FAULT(expert_skip_empty_rank);
PARITY_USES_FAULT(moe_tracker_size_per_stage);
PARITY_USES_FAULT(observe_forced_logits);
PARITY_USES_FAULT(optimizer_step_not_saved);
PARITY_USES_FAULT(packed_positions_global);
PARITY_USES_FAULT(replica_saved_per_rank);
PARITY_USES_FAULT(reshard_flat_buffer_order);
PARITY_USES_FAULT(resume_rng_not_restored);
PARITY_USES_FAULT(recompute_rng_not_restored);
PARITY_USES_FAULT(router_stats_include_padding);
PARITY_USES_FAULT(sqrt_before_sum);
PARITY_USES_FAULT(warmup_counted_as_step);
PARITY_USES_FAULT(wrong_gather_precedence);

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
       {fault_recompute_rng_not_restored, fault_warmup_counted_as_step, fault_observe_forced_logits,
        fault_expert_skip_empty_rank, fault_aux_loss_tracked_on_recompute,
        fault_expert_load_count_ungated, fault_aux_loss_tracker_host_side,
        fault_router_stats_include_padding, fault_collective_skipped_when_zero}) {
    RunConfig c = generated;
    if (!scenarios::shape_for_fault(c, f)) continue;
    RC_ASSERT(checks::validate_check_scenario(c).empty());
    if (f == fault_recompute_rng_not_restored) {
      RC_ASSERT(c.dropout > 0);
      RC_ASSERT(c.recompute.rfind("full-", 0) == 0);
    } else if (f == fault_warmup_counted_as_step) {
      RC_ASSERT(c.graphs == GraphMode::per_layer);
      RC_ASSERT(c.graph_warmup >= 1);
      RC_ASSERT(c.steps >= 2);
    } else if (f == fault_observe_forced_logits) {
      RC_ASSERT(c.moe_force_routing != ForcedRouting::none);
    } else if (f == fault_expert_skip_empty_rank) {
      RC_ASSERT(c.ep == 2);
      RC_ASSERT(c.moe_force_routing == ForcedRouting::biased);
      RC_ASSERT(c.moe_topk <= c.moe_experts / 2);
    } else if (f == fault_aux_loss_tracked_on_recompute) {
      RC_ASSERT(logs_a_loss(c));
      RC_ASSERT(checkpoints_router(c));
    } else if (f == fault_expert_load_count_ungated) {
      RC_ASSERT(c.moe_per_layer_logging);
      RC_ASSERT(checkpoints_router(c));
    } else if (f == fault_aux_loss_tracker_host_side) {
      RC_ASSERT(logs_a_loss(c));
      RC_ASSERT(c.graphs != GraphMode::none);
      if (c.graphs == GraphMode::per_layer) {
        RC_ASSERT(parse_graph_scope(c.graph_scope, nullptr)->captures_router());
        RC_ASSERT(c.steps >= 2);
      } else {
        RC_ASSERT(c.steps >= c.graph_warmup + 2);
      }
    } else if (f == fault_collective_skipped_when_zero) {
      // An idle EP rank and the gradient norm, else idle sequence ranks and the tracker.
      const bool norm =
          std::find(c.metrics.begin(), c.metrics.end(), "global-wgrad-l2") != c.metrics.end();
      RC_ASSERT((c.ep == 2 && c.moe_force_routing == ForcedRouting::biased &&
                 c.moe_topk <= c.moe_experts / 2 && norm) ||
                (c.padding_fraction >= 0.5 && c.moe_per_layer_logging));
      RC_ASSERT(c.check_collectives);
    } else {
      RC_ASSERT(c.moe_per_layer_logging);
      RC_ASSERT(c.padding_fraction > 0);
    }
  }
}

// moe-tracker-size-per-stage: MoE layers and the tracker on stages that
// build different numbers of layers (the per-stage vectors' sizes differ).
RC_GTEST_PROP(FaultShapes, ShapedPipelineScenariosHoldTheTrackerOnUnevenStages, ()) {
  const RunConfig generated = *scenarios::gen_pipeline_scenario();
  RunConfig c = generated;
  if (!scenarios::shape_for_fault(c, fault_moe_tracker_size_per_stage)) {
    const std::vector<ConfigViolation> v = checks::validate_check_scenario(c);
    RC_LOG() << (v.empty() ? std::string("valid") : format_for_cli(v.front())) << "\n";
    // MoE needs sp with tp > 1: the one case declined
    RC_ASSERT(generated.tp > 1 && !generated.sp);
    return;
  }
  RC_ASSERT(checks::validate_check_scenario(c).empty());
  RC_ASSERT(c.moe_experts > 0 && c.moe_per_layer_logging);
  const PipelineLayoutConfig layout = model_config_from(c).pipeline_layout();
  std::set<int> built;
  for (int stage = 0; stage < c.pp; ++stage) {
    int layers = 0;
    for (int v = 0; v < virtual_stages(layout); ++v)
      layers += num_layers_to_build(layout, v, stage);
    built.insert(layers);
  }
  RC_ASSERT(built.size() > 1u);
}

// The resume faults: a valid scenario that resumes, and what each fault needs
// at the resume (fault_shapes.cpp), or the case declined.
RC_GTEST_PROP(FaultShapes, ShapedResumeScenariosAreValidAndTakeTheFaultsPath, ()) {
  const RunConfig generated = *scenarios::gen_scenario();
  for (const CodePathFault fault : {fault_reshard_flat_buffer_order, fault_resume_rng_not_restored,
                                    fault_optimizer_step_not_saved, fault_replica_saved_per_rank}) {
    RunConfig c = generated;
    if (!scenarios::shape_for_fault(c, fault)) continue;
    RC_ASSERT(checks::validate_check_scenario(c).empty());
    RC_ASSERT(c.resume_at >= 1);
    RC_ASSERT(c.resume_at < c.steps);
    const RunConfig at = resumed_config(c).value();
    if (fault == fault_reshard_flat_buffer_order) {
      RC_ASSERT(c.distributed_optimizer && c.optimizer == OptimizerKind::adam);
      RC_ASSERT(c.dtype == ModelDType::fp64 && c.lr > 0);
      RC_ASSERT(at.dp != c.dp);
    } else if (fault == fault_resume_rng_not_restored) {
      RC_ASSERT(c.dropout > 0 && same_layout(c, at));
    } else if (fault == fault_optimizer_step_not_saved) {
      RC_ASSERT(c.optimizer == OptimizerKind::adam && c.lr > 0);
    } else {
      RC_ASSERT(c.world_size() > 1);
    }
  }
}

// wrong-gather-precedence: a runtime gather_output that overrides the
// constructor's, and a logits metric; TP 1 (nothing to gather) declined.
RC_GTEST_PROP(FaultShapes, ShapedGatherPrecedenceScenariosOverrideTheConstructorFlag, ()) {
  RunConfig c = *scenarios::gen_scenario();
  const int tp = c.tp;
  if (!scenarios::shape_for_fault(c, fault_wrong_gather_precedence)) {
    RC_ASSERT(tp == 1);
    return;
  }
  RC_ASSERT(checks::validate_check_scenario(c).empty());
  RC_ASSERT(c.runtime_gather_output != RuntimeGatherOption::unset);
  RC_ASSERT((c.runtime_gather_output == RuntimeGatherOption::on) != c.gather_output);
  RC_ASSERT(std::find(c.metrics.begin(), c.metrics.end(), "global-output-logits-l2") !=
            c.metrics.end());
}

// packed-positions-global: packed documents under CP whose first is padded
// (so the second moves with the layout), learned position embeddings.
RC_GTEST_PROP(FaultShapes, ShapedPackedScenariosPadTheFirstDocumentUnderCp, ()) {
  RunConfig c = *scenarios::gen_scenario();
  RC_PRE(c.cp > 1 && c.pp == 1 && c.mtp_layers == 0);
  RC_ASSERT(scenarios::shape_for_fault(c, fault_packed_positions_global));
  const auto lengths = parse_packed_seq_lengths(c.packed_seq_lengths, nullptr).value();
  RC_ASSERT(lengths.size() >= 2u);
  RC_ASSERT(lengths[0] % (2 * c.cp) != 0);
  RC_ASSERT(c.position_embedding == PositionEmbeddingKind::learned);
  RC_ASSERT(checks::validate_check_scenario(c).empty());
}

// A fault without a shape leaves the scenario as generated.
TEST(FaultShapes, OtherFaultsLeaveTheScenarioAlone) {
  RunConfig c;
  c.moe_experts = 4;
  const std::string before = to_json(c).dump();
  EXPECT_TRUE(scenarios::shape_for_fault(c, fault_sqrt_before_sum));
  EXPECT_EQ(to_json(c).dump(), before);
}

// A layout that cannot hold EP 2 cannot show an empty expert rank.
TEST(FaultShapes, DeclinesWhatCannotShowTheFault) {
  RunConfig c;
  c.moe_experts = 4;
  c.dp = 1;
  c.cp = 1;
  EXPECT_FALSE(scenarios::shape_for_fault(c, fault_expert_skip_empty_rank));
  EXPECT_FALSE(scenarios::shape_for_fault(c, fault_collective_skipped_when_zero));  // tp 1: no SP
  RunConfig full;
  full.moe_experts = 4;
  full.recompute = "full-uniform";
  full.graphs = GraphMode::none;
  EXPECT_FALSE(scenarios::shape_for_fault(full, fault_aux_loss_tracker_host_side));
}

}  // namespace
}  // namespace parity
