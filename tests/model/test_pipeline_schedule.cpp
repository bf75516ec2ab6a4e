// Pipeline schedules (harness/model/pipeline_schedule.h) and their simulator
// (pipeline_simulator.h): small schedules worked out by hand from Megatron's
// rules (warmup pp - rank - 1 forwards, then one forward one backward, then
// the cooldown backwards; interleaved: get_schedule_table's groups, the ring
// from the last stage's chunk c to the first stage's chunk c + 1), the
// validation rules, and the simulator's verdicts on good and broken
// schedules. Megatron itself, live, is compared in the `megatron` label
// (tests/megatron/pipeline_schedule_conformance.cpp); the property over
// random configurations is tests/properties/test_pipeline_schedule_properties.cpp.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/pipeline_schedule.h"
#include "harness/model/pipeline_simulator.h"

namespace parity {
namespace {

PipelineScheduleConfig cfg(int pp, int vpp, int microbatches) {
  PipelineScheduleConfig c;
  c.pp = pp;
  c.vpp = vpp;
  c.microbatches = microbatches;
  return c;
}

std::vector<std::string> listing(const std::vector<ScheduleStep>& steps) {
  std::vector<std::string> out;
  for (const ScheduleStep& s : steps) out.push_back(describe(s));
  return out;
}

// "F0.1" = forward of microbatch 0 on chunk 1, "B2.0" = backward; compute steps only.
std::string compute_order(const std::vector<ScheduleStep>& steps) {
  std::string out;
  for (const ScheduleStep& s : steps) {
    if (s.kind != ScheduleStep::Kind::compute) continue;
    if (!out.empty()) out += ' ';
    out += (s.pass == PipelinePass::forward ? "F" : "B") + std::to_string(s.microbatch) + "." +
           std::to_string(s.chunk);
  }
  return out;
}

std::string rule(const PipelineScheduleConfig& c) {
  const auto v = validate_pipeline_schedule(c);
  return v.empty() ? std::string()
                   : v.front().field + " = " + v.front().value + ": " + v.front().rule;
}

TEST(PipelineSchedule, ScheduleTableIsMegatrons) {
  // get_schedule_table's docstring: PP2 N3 M5 with VP2.
  std::string table;
  for (const ChunkMicrobatch& e : pipeline_schedule_table(5, 2, 3))
    table += std::to_string(e.microbatch) + "." + std::to_string(e.chunk) + " ";
  EXPECT_EQ(table, "0.0 1.0 2.0 0.1 1.1 2.1 3.0 4.0 3.1 4.1 ");
  table.clear();
  // microbatch_group_size_per_vp_stage's docstring: PP2 VP2 N2 M4.
  for (const ChunkMicrobatch& e : pipeline_schedule_table(4, 2, 2))
    table += std::to_string(e.microbatch) + "." + std::to_string(e.chunk) + " ";
  EXPECT_EQ(table, "0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1 ");
}

TEST(PipelineSchedule, WarmupForwards) {
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(pipeline_warmup_forwards(cfg(4, 1, 8), rank), 3 - rank);
  EXPECT_EQ(pipeline_warmup_forwards(cfg(4, 1, 2), 0), 2);  // at most every microbatch
  EXPECT_EQ(pipeline_warmup_forwards(cfg(2, 2, 4), 0), 4);  // 2 (pp - rank - 1) + (vpp - 1) group
  EXPECT_EQ(pipeline_warmup_forwards(cfg(2, 2, 4), 1), 2);
  EXPECT_EQ(pipeline_warmup_forwards(cfg(4, 2, 4), 0), 8);  // 10, capped at the 8 forwards
  EXPECT_EQ(pipeline_warmup_forwards(cfg(1, 1, 5), 0), 0);
}

TEST(PipelineSchedule, NoPipeliningRunsForwardThenBackwardPerMicrobatch) {
  const auto steps = pipeline_schedule(cfg(1, 1, 3), 0);
  EXPECT_EQ(compute_order(steps), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0");
  EXPECT_EQ(steps.size(), 6u);  // no communication at all
  EXPECT_EQ(pipeline_schedule_kind(cfg(1, 1, 3)), PipelineScheduleKind::no_pipelining);
}

TEST(PipelineSchedule, OneFOneBTwoStagesThreeMicrobatches) {
  const PipelineScheduleConfig c = cfg(2, 1, 3);
  EXPECT_EQ(pipeline_schedule_kind(c), PipelineScheduleKind::one_f_one_b);
  // Stage 0: one warmup forward, two 1F1B rounds, one cooldown backward. The
  // first stage receives no activation and sends no gradient, so those calls
  // move nothing.
  EXPECT_EQ(listing(pipeline_schedule(c, 0)),
            (std::vector<std::string>{
                "recv_forward []",
                "forward mb 0 chunk 0",
                "send_forward [send activation mb 0 chunk 0 to stage 1]",
                "recv_forward []",
                "forward mb 1 chunk 0",
                "send_forward_recv_backward [send activation mb 1 chunk 0 to stage 1; recv "
                "gradient mb 0 chunk 0 from stage 1]",
                "backward mb 0 chunk 0",
                "send_backward_recv_forward []",
                "forward mb 2 chunk 0",
                "send_forward_recv_backward [send activation mb 2 chunk 0 to stage 1; recv "
                "gradient mb 1 chunk 0 from stage 1]",
                "backward mb 1 chunk 0",
                "send_backward []",
                "recv_backward [recv gradient mb 2 chunk 0 from stage 1]",
                "backward mb 2 chunk 0",
                "send_backward []",
            }));
  // Stage 1 (last): no warmup; it sends no activation and receives no gradient.
  EXPECT_EQ(listing(pipeline_schedule(c, 1)),
            (std::vector<std::string>{
                "recv_forward [recv activation mb 0 chunk 0 from stage 0]",
                "forward mb 0 chunk 0",
                "send_forward_recv_backward []",
                "backward mb 0 chunk 0",
                "send_backward_recv_forward [send gradient mb 0 chunk 0 to stage 0; recv "
                "activation mb 1 chunk 0 from stage 0]",
                "forward mb 1 chunk 0",
                "send_forward_recv_backward []",
                "backward mb 1 chunk 0",
                "send_backward_recv_forward [send gradient mb 1 chunk 0 to stage 0; recv "
                "activation mb 2 chunk 0 from stage 0]",
                "forward mb 2 chunk 0",
                "send_forward_recv_backward []",
                "backward mb 2 chunk 0",
                "send_backward [send gradient mb 2 chunk 0 to stage 0]",
            }));
}

TEST(PipelineSchedule, OneFOneBFourStagesEightMicrobatches) {
  const PipelineScheduleConfig c = cfg(4, 1, 8);
  EXPECT_EQ(compute_order(pipeline_schedule(c, 0)),
            "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 F6.0 B3.0 F7.0 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(compute_order(pipeline_schedule(c, 1)),
            "F0.0 F1.0 F2.0 B0.0 F3.0 B1.0 F4.0 B2.0 F5.0 B3.0 F6.0 B4.0 F7.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(compute_order(pipeline_schedule(c, 2)),
            "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 F4.0 B3.0 F5.0 B4.0 F6.0 B5.0 F7.0 B6.0 B7.0");
  EXPECT_EQ(compute_order(pipeline_schedule(c, 3)),
            "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 F4.0 B4.0 F5.0 B5.0 F6.0 B6.0 F7.0 B7.0");
  // A middle stage moves something in every call.
  std::vector<std::string> stage1 = {
      "recv_forward [recv activation mb 0 chunk 0 from stage 0]",
      "forward mb 0 chunk 0",
      "send_forward [send activation mb 0 chunk 0 to stage 2]",
      "recv_forward [recv activation mb 1 chunk 0 from stage 0]",
      "forward mb 1 chunk 0",
      "send_forward [send activation mb 1 chunk 0 to stage 2]",
      "recv_forward [recv activation mb 2 chunk 0 from stage 0]",
  };
  for (int i = 0; i < 6; ++i) {
    const std::string f = std::to_string(i + 2), b = std::to_string(i);
    stage1.push_back("forward mb " + f + " chunk 0");
    stage1.push_back("send_forward_recv_backward [send activation mb " + f +
                     " chunk 0 to stage 2; recv gradient mb " + b + " chunk 0 from stage 2]");
    stage1.push_back("backward mb " + b + " chunk 0");
    stage1.push_back(i < 5 ? "send_backward_recv_forward [send gradient mb " + b +
                                 " chunk 0 to stage 0; recv activation mb " +
                                 std::to_string(i + 3) + " chunk 0 from stage 0]"
                           : "send_backward [send gradient mb 5 chunk 0 to stage 0]");
  }
  for (int b = 6; b < 8; ++b) {
    const std::string m = std::to_string(b);
    stage1.push_back("recv_backward [recv gradient mb " + m + " chunk 0 from stage 2]");
    stage1.push_back("backward mb " + m + " chunk 0");
    stage1.push_back("send_backward [send gradient mb " + m + " chunk 0 to stage 0]");
  }
  EXPECT_EQ(listing(pipeline_schedule(c, 1)), stage1);
}

TEST(PipelineSchedule, InterleavedTwoStagesTwoChunksFourMicrobatches) {
  const PipelineScheduleConfig c = cfg(2, 2, 4);
  EXPECT_EQ(pipeline_schedule_kind(c), PipelineScheduleKind::interleaved);
  // Table (group 2): 0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1; backward runs it with
  // the chunks reversed. Stage 0 warms up with 4 forwards, stage 1 with 2.
  EXPECT_EQ(compute_order(pipeline_schedule(c, 0)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(compute_order(pipeline_schedule(c, 1)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // Stage 1's chunk 0 feeds stage 0's chunk 1 around the ring; stage 0's
  // chunk 1 sends its gradients back to stage 1's chunk 0.
  EXPECT_EQ(
      listing(pipeline_schedule(c, 0)),
      (std::vector<std::string>{
          "recv_forward []",
          "forward mb 0 chunk 0",
          "send_forward_recv_forward [send activation mb 0 chunk 0 to stage 1]",
          "forward mb 1 chunk 0",
          "send_forward_recv_forward [recv activation mb 0 chunk 1 from stage 1; send activation "
          "mb 1 chunk 0 to stage 1]",
          "forward mb 0 chunk 1",
          "send_forward_recv_forward [recv activation mb 1 chunk 1 from stage 1; send activation "
          "mb 0 chunk 1 to stage 1]",
          "forward mb 1 chunk 1",
          "send_forward_backward_recv_forward_backward [send activation mb 1 chunk 1 to stage 1; "
          "recv gradient mb 0 chunk 1 from stage 1]",
          "forward mb 2 chunk 0",
          "backward mb 0 chunk 1",
          "send_forward_backward_recv_forward_backward [send gradient mb 0 chunk 1 to stage 1; "
          "send activation mb 2 chunk 0 to stage 1; recv gradient mb 1 chunk 1 from stage 1]",
          "forward mb 3 chunk 0",
          "backward mb 1 chunk 1",
          "send_forward_backward_recv_forward_backward [send gradient mb 1 chunk 1 to stage 1; "
          "recv activation mb 2 chunk 1 from stage 1; send activation mb 3 chunk 0 to stage 1; "
          "recv gradient mb 0 chunk 0 from stage 1]",
          "forward mb 2 chunk 1",
          "backward mb 0 chunk 0",
          "send_forward_backward_recv_forward_backward [recv activation mb 3 chunk 1 from stage "
          "1; send activation mb 2 chunk 1 to stage 1; recv gradient mb 1 chunk 0 from stage 1]",
          "forward mb 3 chunk 1",
          "backward mb 1 chunk 0",
          "send_forward_backward_recv_forward_backward [send activation mb 3 chunk 1 to stage 1; "
          "recv gradient mb 2 chunk 1 from stage 1]",
          "backward mb 2 chunk 1",
          "send_backward_recv_backward [send gradient mb 2 chunk 1 to stage 1; recv gradient mb "
          "3 chunk 1 from stage 1]",
          "backward mb 3 chunk 1",
          "send_backward_recv_backward [send gradient mb 3 chunk 1 to stage 1; recv gradient mb "
          "2 chunk 0 from stage 1]",
          "backward mb 2 chunk 0",
          "send_backward_recv_backward [recv gradient mb 3 chunk 0 from stage 1]",
          "backward mb 3 chunk 0",
          "send_backward_recv_backward []",
      }));
  const auto stage1 = listing(pipeline_schedule(c, 1));
  ASSERT_EQ(stage1.size(), 27u);
  EXPECT_EQ(stage1[0], "recv_forward [recv activation mb 0 chunk 0 from stage 0]");
  EXPECT_EQ(stage1[2],
            "send_forward_recv_forward [recv activation mb 1 chunk 0 from stage 0; send "
            "activation mb 0 chunk 0 to stage 0]");
  EXPECT_EQ(stage1[13],
            "send_forward_backward_recv_forward_backward [send gradient mb 0 chunk 0 to stage 0; "
            "recv activation mb 3 chunk 0 from stage 0; send activation mb 2 chunk 0 to stage 0; "
            "recv gradient mb 1 chunk 0 from stage 0]");
  EXPECT_EQ(stage1[26], "send_backward_recv_backward [send gradient mb 3 chunk 0 to stage 0]");
}

// forward_only (the evaluation): every forward in the training schedule's
// forward order, no backward, no gradient message; 1F1B keeps its warmup and
// then sends each forward on and receives the next (Megatron's calls).
TEST(PipelineSchedule, ForwardOnlyRunsEveryForwardAndNoBackward) {
  PipelineScheduleConfig c = cfg(2, 1, 3);
  c.forward_only = true;
  EXPECT_EQ(compute_order(pipeline_schedule(c, 0)), "F0.0 F1.0 F2.0");
  EXPECT_EQ(listing(pipeline_schedule(c, 0)),
            (std::vector<std::string>{"recv_forward []", "forward mb 0 chunk 0",
                                      "send_forward [send activation mb 0 chunk 0 to stage 1]",
                                      "recv_forward []", "forward mb 1 chunk 0",
                                      "send_forward [send activation mb 1 chunk 0 to stage 1]",
                                      "recv_forward []", "forward mb 2 chunk 0",
                                      "send_forward [send activation mb 2 chunk 0 to stage 1]"}));
  EXPECT_EQ(listing(pipeline_schedule(c, 1)),
            (std::vector<std::string>{"recv_forward [recv activation mb 0 chunk 0 from stage 0]",
                                      "forward mb 0 chunk 0", "send_forward []",
                                      "recv_forward [recv activation mb 1 chunk 0 from stage 0]",
                                      "forward mb 1 chunk 0", "send_forward []",
                                      "recv_forward [recv activation mb 2 chunk 0 from stage 0]",
                                      "forward mb 2 chunk 0", "send_forward []"}));
  PipelineScheduleConfig v = cfg(2, 2, 4);
  v.forward_only = true;
  EXPECT_EQ(pipeline_warmup_forwards(v, 1), 8);  // every forward
  EXPECT_EQ(compute_order(pipeline_schedule(v, 1)), "F0.0 F1.0 F0.1 F1.1 F2.0 F3.0 F2.1 F3.1");
  PipelineScheduleConfig none = cfg(1, 1, 2);
  none.forward_only = true;
  EXPECT_EQ(compute_order(pipeline_schedule(none, 0)), "F0.0 F1.0");
  for (const PipelineScheduleConfig& f : {c, v, cfg(4, 1, 8), cfg(4, 2, 8), cfg(3, 3, 6)}) {
    PipelineScheduleConfig g = f;
    g.forward_only = true;
    for (int p = 0; p < g.pp; ++p)
      for (const ScheduleStep& s : pipeline_schedule(g, p)) {
        EXPECT_FALSE(s.kind == ScheduleStep::Kind::compute && s.pass == PipelinePass::backward);
        for (const P2POp& op : s.ops) EXPECT_EQ(op.tensor, P2PTensor::activation);
      }
    const auto sim = simulate_pipeline(pipeline_schedules(g), P2PMatching::by_tensor_kind);
    EXPECT_EQ(sim.outcome, PipelineSimulation::Outcome::completed) << sim.message;
  }
}

TEST(PipelineSchedule, Validation) {
  EXPECT_EQ(rule(cfg(1, 1, 1)), "");
  EXPECT_EQ(rule(cfg(4, 1, 3)), "");  // 1F1B takes any count
  EXPECT_EQ(rule(cfg(2, 2, 4)), "");
  EXPECT_EQ(rule(cfg(0, 1, 1)), "pp = 0: must be at least 1");
  EXPECT_EQ(rule(cfg(2, 0, 1)), "vpp = 0: must be at least 1");
  EXPECT_EQ(rule(cfg(2, 1, 0)), "microbatches = 0: must be at least 1");
  EXPECT_EQ(rule(cfg(1, 2, 4)), "vpp = 2: more than one model chunk per stage needs pp > 1");
  EXPECT_EQ(
      rule(cfg(4, 2, 2)),
      "microbatches = 2: the interleaved schedule (vpp 2) needs at least pp = 4 microbatches");
  EXPECT_EQ(rule(cfg(2, 2, 5)),
            "microbatches = 5: the interleaved schedule (vpp 2) needs a multiple of pp 2 "
            "microbatches");
  PipelineScheduleConfig c = cfg(2, 2, 5);
  c.microbatch_group = 3;  // 3 + a last group of 2 = pp: Megatron's docstring example
  EXPECT_EQ(rule(c), "");
  c = cfg(3, 2, 7);
  c.microbatch_group = 4;  // last group of 3
  EXPECT_EQ(rule(c), "");
  c.microbatch_group = 5;  // last group of 2 < pp 3
  EXPECT_EQ(rule(c),
            "microbatches = 7: the interleaved schedule (vpp 2) in groups of 5 leaves a last "
            "group of 2 microbatches; it must be empty or at least pp = 3");
  c.microbatch_group = 2;
  EXPECT_EQ(rule(c),
            "microbatch-group = 2: the interleaved schedule (vpp 2) runs groups of pp = 3 to "
            "microbatches = 7 microbatches per chunk");
  c.microbatch_group = 8;
  EXPECT_EQ(rule(c).substr(0, 20), "microbatch-group = 8");
  c = cfg(4, 1, 3);
  c.microbatch_group = 1;  // read only by the interleaved schedule
  EXPECT_EQ(rule(c), "");
  EXPECT_THROW(pipeline_schedule(cfg(2, 2, 5), 0), std::invalid_argument);
  EXPECT_THROW(pipeline_schedule(cfg(2, 1, 5), 2), std::invalid_argument);
  // The layout's overload is the same rule with Megatron's default group.
  EXPECT_EQ(validate_pipeline_schedule(2, 2, 5).front().rule,
            validate_pipeline_schedule(cfg(2, 2, 5)).front().rule);
}

TEST(PipelineSimulator, HandSchedulesComplete) {
  for (const PipelineScheduleConfig& c : {cfg(1, 1, 3), cfg(2, 1, 3), cfg(4, 1, 8), cfg(4, 1, 2),
                                          cfg(2, 2, 4), cfg(4, 2, 8), cfg(3, 3, 6)}) {
    const auto sim = simulate_pipeline(pipeline_schedules(c), P2PMatching::by_tensor_kind);
    EXPECT_EQ(sim.outcome, PipelineSimulation::Outcome::completed) << sim.message;
    for (int p = 0; p < c.pp; ++p)
      EXPECT_EQ(sim.steps_done[static_cast<std::size_t>(p)], pipeline_schedule(c, p).size());
  }
}

// Megatron's batch at pp 2 posts send_prev before send_next on one stage and
// recv_prev before recv_next on the other, to and from the same peer: on a
// tagless transport the gradient meets the activation's recv.
TEST(PipelineSimulator, TaglessMatchingCrossesActivationAndGradientAtTwoStagesInterleaved) {
  const auto stages = pipeline_schedules(cfg(2, 2, 4));
  const auto sim = simulate_pipeline(stages, P2PMatching::tagless);
  EXPECT_EQ(sim.outcome, PipelineSimulation::Outcome::mismatched_pair);
  EXPECT_EQ(sim.message,
            "mismatched pair: stage 0 (send_forward_backward_recv_forward_backward, step 11) posts "
            "'send gradient mb 0 chunk 1 to stage 1' and stage 1 "
            "(send_forward_backward_recv_forward_backward, step 10) meets it with 'recv "
            "activation mb 2 chunk 0 from stage 0'");
  // Neither 1F1B at pp 2 nor interleaving at pp 3 puts two tensors on one channel in one batch.
  EXPECT_EQ(simulate_pipeline(pipeline_schedules(cfg(2, 1, 5)), P2PMatching::tagless).outcome,
            PipelineSimulation::Outcome::completed);
  EXPECT_EQ(simulate_pipeline(pipeline_schedules(cfg(3, 2, 6)), P2PMatching::tagless).outcome,
            PipelineSimulation::Outcome::completed);
}

// The pp-send-order fault: a stage sends its activations out of schedule order.
TEST(PipelineSimulator, CatchesActivationsSentOutOfOrder) {
  auto stages = pipeline_schedules(cfg(4, 1, 8));
  ASSERT_TRUE(swap_first_activation_sends(stages[1]));
  const auto sim = simulate_pipeline(stages, P2PMatching::by_tensor_kind);
  EXPECT_EQ(sim.outcome, PipelineSimulation::Outcome::mismatched_pair);
  EXPECT_EQ(sim.message,
            "mismatched pair: stage 1 (send_forward, step 2) posts 'send activation mb 1 chunk 0 "
            "to stage 2' and stage 2 (recv_forward, step 0) meets it with 'recv activation mb 0 "
            "chunk 0 from stage 1'");
  auto last = pipeline_schedule(cfg(2, 1, 3), 1);
  EXPECT_FALSE(swap_first_activation_sends(last));  // the last stage sends no activation
}

TEST(PipelineSimulator, ReportsADeadlockNamingEveryBlockedStage) {
  // Stage 0 waits for the gradient before it sends the activation that
  // stage 1 needs to produce it.
  auto stages = pipeline_schedules(cfg(2, 1, 1));
  ASSERT_EQ(describe(stages[0][2]), "send_forward [send activation mb 0 chunk 0 to stage 1]");
  ASSERT_EQ(describe(stages[0][3]), "recv_backward [recv gradient mb 0 chunk 0 from stage 1]");
  std::swap(stages[0][2], stages[0][3]);
  const auto sim = simulate_pipeline(stages, P2PMatching::by_tensor_kind);
  EXPECT_EQ(sim.outcome, PipelineSimulation::Outcome::deadlock);
  EXPECT_EQ(sim.message,
            "deadlock: stage 0 (recv_backward, step 2) waits on 'recv gradient mb 0 chunk 0 from "
            "stage 1', whose partner is stage 1 (send_backward, step 4)'s 'send gradient mb 0 "
            "chunk 0 to stage 0', but stage 1 is at step 0 (recv_forward [recv activation mb 0 "
            "chunk 0 from stage 0]); stage 1 (recv_forward, step 0) waits on 'recv activation mb "
            "0 chunk 0 from stage 0', whose partner is stage 0 (send_forward, step 3)'s 'send "
            "activation mb 0 chunk 0 to stage 1', but stage 0 is at step 2 (recv_backward [recv "
            "gradient mb 0 chunk 0 from stage 1])");
  EXPECT_EQ(sim.steps_done, (std::vector<std::size_t>{2, 0}));
}

TEST(PipelineSimulator, ReportsASendNobodyReceives) {
  auto stages = pipeline_schedules(cfg(2, 1, 1));
  ASSERT_EQ(describe(stages[1][0]), "recv_forward [recv activation mb 0 chunk 0 from stage 0]");
  stages[1][0].ops.clear();
  const auto sim = simulate_pipeline(stages, P2PMatching::by_tensor_kind);
  EXPECT_EQ(sim.outcome, PipelineSimulation::Outcome::unmatched);
  EXPECT_EQ(sim.message,
            "unmatched: stage 0 (send_forward, step 2) posts 'send activation mb 0 chunk 0 to "
            "stage 1' but stage 1 posts no recv for it on that channel");
}

}  // namespace
}  // namespace parity
