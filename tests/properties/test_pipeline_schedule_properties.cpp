// Pipeline schedules over random configurations (pp 1..8, vpp 1..4, any valid
// microbatch count and microbatch group): every stage runs each (microbatch,
// chunk) forward exactly once and backward exactly once, the backward after
// the forward, never more forwards in flight than its warmup + 1; every op
// goes to a neighbour on the ring in the right direction, the first and last
// stages skipping what they do not need; and the stages, played against each
// other by the simulator, complete without a deadlock or a mismatched pair.
// The simulator has teeth: a stage sending its activations out of order (the
// pp-send-order fault) is caught every time. Hand-worked schedules:
// tests/model/test_pipeline_schedule.cpp; Megatron live: the `megatron` label.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "harness/model/pipeline_schedule.h"
#include "harness/model/pipeline_simulator.h"

namespace parity {

// rapidcheck prints a counterexample with this (found by argument-dependent lookup).
void showValue(const PipelineScheduleConfig& c, std::ostream& os) {
  os << "pp " << c.pp << " vpp " << c.vpp << " microbatches " << c.microbatches
     << " microbatch-group " << (c.microbatch_group ? std::to_string(*c.microbatch_group) : "-");
}

namespace {

// Valid configurations only, built rather than filtered: under vpp > 1 a
// group in [pp, pp + 3], whole groups, and a last group that is empty or at
// least pp.
rc::Gen<PipelineScheduleConfig> valid_config() {
  return rc::gen::exec([] {
    PipelineScheduleConfig c;
    c.pp = *rc::gen::inRange(1, 9);
    c.vpp = c.pp == 1 ? 1 : *rc::gen::inRange(1, 5);
    if (c.vpp == 1) {
      c.microbatches = *rc::gen::inRange(1, 25);
      return c;
    }
    const bool explicit_group = *rc::gen::arbitrary<bool>();
    const int group = explicit_group ? c.pp + *rc::gen::inRange(0, 4) : c.pp;
    const int last =
        group > c.pp && *rc::gen::arbitrary<bool>() ? *rc::gen::inRange(c.pp, group) : 0;
    c.microbatches = *rc::gen::inRange(1, 4) * group + last;
    if (explicit_group) c.microbatch_group = group;
    return c;
  });
}

// Each (microbatch, chunk) forward once and backward once, backward after
// forward, at most warmup + 1 forwards awaiting their backward.
void check_compute(const PipelineScheduleConfig& c, int rank,
                   const std::vector<ScheduleStep>& steps) {
  const auto index = [&](int mb, int chunk) {
    RC_ASSERT(mb >= 0 && mb < c.microbatches && chunk >= 0 && chunk < c.vpp);
    return static_cast<std::size_t>(mb * c.vpp + chunk);
  };
  std::vector<int> forwards(static_cast<std::size_t>(c.microbatches * c.vpp), 0);
  std::vector<int> backwards(forwards.size(), 0);
  int in_flight = 0, peak = 0;
  for (const ScheduleStep& s : steps) {
    if (s.kind != ScheduleStep::Kind::compute) continue;
    const std::size_t i = index(s.microbatch, s.chunk);
    if (s.pass == PipelinePass::forward) {
      RC_ASSERT(forwards[i]++ == 0);
      peak = std::max(peak, ++in_flight);
    } else {
      RC_ASSERT(forwards[i] == 1);  // backward after its forward
      RC_ASSERT(backwards[i]++ == 0);
      --in_flight;
    }
  }
  for (std::size_t i = 0; i < forwards.size(); ++i)
    RC_ASSERT(forwards[i] == 1 && backwards[i] == 1);
  RC_ASSERT(peak <= pipeline_warmup_forwards(c, rank) + 1);
}

// Activations to the next stage, gradients to the previous; nothing into the
// first virtual stage or out of the last one.
void check_ops(const PipelineScheduleConfig& c, int rank, const std::vector<ScheduleStep>& steps) {
  const int next = (rank + 1) % c.pp, prev = (rank - 1 + c.pp) % c.pp;
  int activation_sends = 0, gradient_sends = 0;
  for (const ScheduleStep& s : steps)
    for (const P2POp& op : s.ops) {
      RC_ASSERT(s.kind == ScheduleStep::Kind::communicate);
      const bool send = op.direction == P2PDirection::send;
      const bool activation = op.tensor == P2PTensor::activation;
      RC_ASSERT(op.peer == (send == activation ? next : prev));
      const bool first_virtual = rank == 0 && op.chunk == 0;
      const bool last_virtual = rank == c.pp - 1 && op.chunk == c.vpp - 1;
      RC_ASSERT(!(first_virtual && (activation ? !send : send)));
      RC_ASSERT(!(last_virtual && (activation ? send : !send)));
      if (send) ++(activation ? activation_sends : gradient_sends);
    }
  const int all = c.microbatches * c.vpp;
  RC_ASSERT(activation_sends == all - (rank == c.pp - 1 ? c.microbatches : 0));
  RC_ASSERT(gradient_sends == all - (rank == 0 ? c.microbatches : 0));
}

RC_GTEST_PROP(PipelineScheduleProperties, every_valid_schedule_runs_each_pass_once_and_completes,
              ()) {
  const PipelineScheduleConfig c = *valid_config();
  RC_ASSERT(validate_pipeline_schedule(c).empty());
  const auto stages = pipeline_schedules(c);
  for (int rank = 0; rank < c.pp; ++rank) {
    check_compute(c, rank, stages[static_cast<std::size_t>(rank)]);
    check_ops(c, rank, stages[static_cast<std::size_t>(rank)]);
  }
  const auto sim = simulate_pipeline(stages, P2PMatching::by_tensor_kind);
  RC_LOG() << sim.message;
  RC_ASSERT(sim.outcome == PipelineSimulation::Outcome::completed);
  for (int rank = 0; rank < c.pp; ++rank)
    RC_ASSERT(sim.steps_done[static_cast<std::size_t>(rank)] ==
              stages[static_cast<std::size_t>(rank)].size());
  // Without tags Megatron's pp-2 interleaved rounds, which carry an activation
  // and a gradient over the one channel, cross; with 2 microbatches stage 0
  // runs every forward before its first backward and no round carries both.
  const auto tagless = simulate_pipeline(stages, P2PMatching::tagless);
  RC_LOG() << tagless.message;
  if (c.pp == 2 && c.vpp > 1 && c.microbatches > 2)
    RC_ASSERT(tagless.outcome == PipelineSimulation::Outcome::mismatched_pair);
  else
    RC_ASSERT(tagless.outcome == PipelineSimulation::Outcome::completed);
}

RC_GTEST_PROP(PipelineScheduleProperties, activations_sent_out_of_order_are_caught, ()) {
  const PipelineScheduleConfig c = *valid_config();
  RC_PRE(c.pp > 1);
  auto stages = pipeline_schedules(c);
  const int rank = *rc::gen::inRange(0, c.pp);
  RC_PRE(swap_first_activation_sends(stages[static_cast<std::size_t>(rank)]));
  const auto sim = simulate_pipeline(stages, P2PMatching::by_tensor_kind);
  RC_LOG() << sim.message;
  RC_ASSERT(sim.outcome == PipelineSimulation::Outcome::mismatched_pair);
  RC_ASSERT(sim.message.find("stage " + std::to_string(rank) + " (") != std::string::npos);
}

}  // namespace
}  // namespace parity
