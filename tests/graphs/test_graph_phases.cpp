// Graph phases on the reference's CPU emulation (contract.md section 3,
// graph_replay of section 5, docs/graph-phases.md): per-layer and
// full-iteration runs follow the phase table, checked from the observations
// recorded per (step, microbatch, phase); replays are compared bit for bit with
// eager runs over several steps with weight updates in between; static buffers
// are reused; is_observing answers inside a replayed region are frozen.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "harness/backend/registry.h"
#include "harness/faults/code_path_faults.h"
#include "harness/graphs/graph_runner.h"
#include "harness/model/gpt_model.h"
#include "harness/observation/execution_point.h"
#include "harness/recompute/checkpoint.h"
#include "tests/graphs/graph_drive.h"
#include "tests/support/model_configs.h"

PARITY_USES_FAULT(notify_on_replay);
PARITY_USES_FAULT(static_grad_aliasing);
PARITY_USES_FAULT(warmup_counted_as_step);

namespace parity {
namespace {

using namespace testing;  // graph_drive.h

// ------------------------------------------------------------------ per-layer
TEST(GraphPhasesPerLayer, FollowsThePhaseTableAndReplaysEqualEager) {
  const int kSteps = 4, kMb = 2;
  ModelConfig c = graph_config();
  ModelConfig eager_cfg = c;
  c.graphs = GraphMode::per_layer;
  const GraphRun g = drive(c, kSteps, kMb);
  const GraphRun e = drive(eager_cfg, kSteps, kMb);
  expect_same_results(g, e);
  for (const Note& n : e.notes) EXPECT_EQ(n.phase, GraphPhase::eager);

  // Step 0 (record): every site once per microbatch; inside sites labelled
  // record, outside sites eager; values equal the eager run's.
  for (int mb = 0; mb < kMb; ++mb) {
    auto gn = select(g, 0, mb), en = select(e, 0, mb);
    ASSERT_EQ(gn.size(), static_cast<size_t>(6 * c.layers + 1));
    ASSERT_EQ(gn.size(), en.size());
    for (size_t i = 0; i < gn.size(); ++i) {
      EXPECT_EQ(gn[i]->name, en[i]->name);
      EXPECT_EQ(gn[i]->phase, inside_site(gn[i]->kind) ? GraphPhase::record : GraphPhase::eager)
          << gn[i]->owner << " " << gn[i]->name;
      EXPECT_TRUE(at::equal(gn[i]->value, en[i]->value)) << gn[i]->owner << " " << gn[i]->name;
    }
  }
  // Between step 0 and step 1 (step -1): per layer, K warmup runs then one
  // capture of the inside sites only; capture contents are NaN, warmup ones not.
  auto between = select(g, -1, -1);
  ASSERT_EQ(between.size(), static_cast<size_t>(c.layers * (c.graph_warmup + 1) * 4));
  size_t i = 0;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string L = "decoder.layers." + std::to_string(l);
    for (std::int64_t run = 0; run <= c.graph_warmup; ++run) {
      const GraphPhase expect = run < c.graph_warmup ? GraphPhase::warmup : GraphPhase::capture;
      for (const char* site :
           {"layernorm_output", "attention_context", "layernorm_output", "mlp_output"}) {
        const Note& n = *between[i++];
        EXPECT_EQ(n.phase, expect) << L << " " << site;
        EXPECT_EQ(n.name, site);
        EXPECT_EQ(n.owner.rfind(L + ".", 0), 0u) << n.owner;
        EXPECT_TRUE(inside_site(n.kind));
        EXPECT_EQ(n.all_nan, expect == GraphPhase::capture) << L << " " << site;
      }
    }
  }
  // Replay steps: outside sites only, once per microbatch, eager, bitwise equal
  // to the eager run's (residuals rebuilt eagerly as output - accumulator).
  for (int step = 1; step < kSteps; ++step) {
    for (int mb = 0; mb < kMb; ++mb) {
      SCOPED_TRACE("step " + std::to_string(step) + " mb " + std::to_string(mb));
      auto gn = select(g, step, mb);
      std::vector<const Note*> en;
      for (const Note* n : select(e, step, mb)) {
        if (!inside_site(n->kind)) en.push_back(n);
      }
      ASSERT_EQ(gn.size(), static_cast<size_t>(2 * c.layers + 1));
      ASSERT_EQ(gn.size(), en.size());
      for (size_t k = 0; k < gn.size(); ++k) {
        EXPECT_FALSE(inside_site(gn[k]->kind));
        EXPECT_EQ(gn[k]->phase, GraphPhase::eager);
        EXPECT_EQ(gn[k]->owner, en[k]->owner);
        EXPECT_EQ(gn[k]->name, en[k]->name);
        EXPECT_TRUE(at::equal(gn[k]->value, en[k]->value)) << gn[k]->owner << " " << gn[k]->name;
      }
    }
  }
  ASSERT_EQ(g.regions.size(), static_cast<size_t>(c.layers));
  for (const GraphRegion& r : g.regions) {
    EXPECT_TRUE(r.captured);
    EXPECT_EQ(r.warmups, c.graph_warmup);
    EXPECT_EQ(r.replays, (kSteps - 1) * kMb) << r.name;
  }
}

TEST(GraphPhasesPerLayer, StaticBuffersAreReusedAcrossReplays) {
  ModelConfig c = graph_config();
  c.graphs = GraphMode::per_layer;
  const GraphRun g = drive(c, 3, 2);
  // Layer 1's accumulator is layer 0's output: a static buffer on replay steps.
  std::vector<const Note*> acc;
  for (const Note& n : g.notes) {
    if (n.step >= 1 && n.owner == "decoder.layers.1" && n.name == "residual_accumulator") {
      acc.push_back(&n);
    }
  }
  ASSERT_EQ(acc.size(), 4u);
  const void* buffer = g.regions[0].static_outputs[0].data_ptr();
  for (const Note* n : acc) EXPECT_EQ(n->kept.data_ptr(), buffer);  // the same storage every replay
  // A consumer that kept the reference instead of compacting sees the last
  // replay's data, not what was observed.
  EXPECT_FALSE(at::equal(acc[0]->kept, acc[0]->value));
  EXPECT_TRUE(at::equal(acc[0]->kept, acc[3]->value));
  // The last layer hands out a clone (Megatron): fresh storage every time.
  for (const Note& n : g.notes) {
    if (n.step >= 1 && n.kind == SourceKind::output_logits) {
      EXPECT_NE(n.kept.data_ptr(), g.regions[1].static_outputs[0].data_ptr());
    }
  }
}

TEST(GraphPhasesPerLayer, BackwardSurvivesLaterReplaysOverwritingTheBuffers) {
  ModelConfig c = graph_config();
  ModelConfig eager_cfg = c;
  c.graphs = GraphMode::per_layer;
  expect_same_results(drive(c, 3, 3, /*interleaved=*/true),
                      drive(eager_cfg, 3, 3, /*interleaved=*/true));
}

TEST(GraphPhasesPerLayer, SelectiveRecomputeInsideGraphedLayers) {
  ModelConfig c = graph_config();
  ModelConfig eager_cfg = c;  // no recompute, no graphs
  c.graphs = GraphMode::per_layer;
  c.recompute = RecomputeKind::selective;
  c.recompute_modules = parse_recompute_modules("core_attn,layernorm,mlp");
  const GraphRun g = drive(c, 3, 2);
  const GraphRun e = drive(eager_cfg, 3, 2);
  // Selective "layernorm" changes the order in which the layer input's three
  // gradient contributions are summed (rounding only), so fp64 rel 1e-12, and
  // every later step inherits it through the weight update.
  expect_same_results(g, e, 1e-12);
  // Checkpoints run normally in the record step (forward no-grad + recompute),
  // and are bypassed (grad on) in warmup and capture and inside replays.
  int forward = 0, recompute = 0, bypass_grad = 0;
  for (const RecomputeEvent& ev : g.log) {
    if (ev.execution == RecomputeExecution::forward) {
      ++forward;
      EXPECT_FALSE(ev.grad_enabled);
    }
    if (ev.execution == RecomputeExecution::recompute) {
      ++recompute;
      EXPECT_FALSE(ev.observations_live);
    }
    if (ev.execution == RecomputeExecution::bypass && ev.grad_enabled) ++bypass_grad;
  }
  const int per_layer = 4;                       // core_attn, mlp, two norms
  EXPECT_EQ(forward, 2 * c.layers * per_layer);  // step 0, two microbatches
  EXPECT_EQ(recompute, forward);
  EXPECT_GE(bypass_grad, c.layers * per_layer * (c.graph_warmup + 1));
  // Exactly once in step 0; nothing inside afterwards.
  std::map<std::tuple<std::int64_t, std::int64_t, std::string, std::string>, int> count;
  for (const Note& n : g.notes) {
    if (n.step >= 0) ++count[{n.step, n.microbatch, n.owner, n.name}];
  }
  for (const auto& [key, n] : count) EXPECT_EQ(n, 1) << std::get<2>(key) << std::get<3>(key);
}

TEST(GraphPhasesPerLayer, IsObservingAnswersInsideAReplayAreFrozenAtCapture) {
  auto backend = make_backend("reference");
  auto runner_owner = backend->make_graph_runner();
  auto* runner = dynamic_cast<PhasedGraphRunner*>(runner_owner.get());
  ASSERT_NE(runner, nullptr);
  runner->configure(GraphOptions{GraphMode::per_layer, 1, nullptr});
  struct Owner : ObservationOwner {
    std::string n = "decoder.layers.0.mlp";
    const std::string& canonical_name() const override { return n; }
  } owner;
  std::vector<std::pair<bool, bool>> answers;  // (mlp_output, attention_context) inside
  int extra_work = 0;
  RegionFn fn = [&](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    answers.emplace_back(is_observing_tensor(SourceKind::mlp_output),
                         is_observing_tensor(SourceKind::attention_context));
    at::Tensor y = in[0] * 2;
    if (is_observing_tensor(SourceKind::mlp_output)) {  // a branch taken at capture stays taken
      ++extra_work;
      observe_tensor(owner, "mlp_output", SourceKind::mlp_output, y);
    }
    return {y};
  };
  int delivered = 0;
  auto callback = [&](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&,
                      OptionalDim, OptionalDim, OptionalDim) { ++delivered; };
  at::Tensor x = at::ones({3}, at::kDouble).requires_grad_(true);
  {
    ExecutionPointScope point(ExecutionPoint{0, 0, GraphPhase::eager});
    auto scope = capture_tensor_observations(callback, KindSet{SourceKind::attention_context});
    runner->run_region("decoder.layers.0", fn, {x}, false);
  }
  EXPECT_EQ(answers.back(), std::make_pair(false, true));
  {
    auto scope = capture_tensor_observations(callback, KindSet{SourceKind::mlp_output});
    runner->create_graphs();  // one warmup, one capture: both observed
  }
  EXPECT_EQ(delivered, 2);
  EXPECT_EQ(answers.back(), std::make_pair(true, false));
  extra_work = 0;
  for (int step = 1; step <= 2; ++step) {
    ExecutionPointScope point(ExecutionPoint{step, 0, GraphPhase::eager});
    // The caller now observes attention_context only, then nothing at all.
    std::optional<TensorObservationCapture> scope;
    if (step == 1) scope.emplace(callback, KindSet{SourceKind::attention_context});
    at::Tensor xi = at::full({3}, double(step), at::kDouble).requires_grad_(true);
    at::Tensor y = runner->run_region("decoder.layers.0", fn, {xi}, false)[0];
    EXPECT_TRUE(at::equal(y, xi.detach() * 2));
    y.sum().backward();
    EXPECT_TRUE(at::equal(xi.grad(), at::full({3}, 2.0, at::kDouble)));
  }
  // Frozen: each replay (and its backward recomputation) answered the capture's
  // kinds and kept taking the branch, whose notification reached nobody.
  for (size_t k = answers.size() - 4; k < answers.size(); k += 2) {
    EXPECT_EQ(answers[k], std::make_pair(true, false)) << k;
  }
  EXPECT_EQ(extra_work, 2);  // the forwards; the backward recomputation runs suspended
  EXPECT_EQ(delivered, 2);
}

// The record step is the first step that calls a region (step 0 here); a call outside any step
// (-1) records without fixing it. The graphs are made when a later step calls a region.
TEST(GraphPhasesPerLayer, TheFirstSteppedCallFixesTheRecordStep) {
  auto backend = make_backend("reference");
  auto runner_owner = backend->make_graph_runner();
  auto* runner = dynamic_cast<PhasedGraphRunner*>(runner_owner.get());
  ASSERT_NE(runner, nullptr);
  runner->configure(GraphOptions{GraphMode::per_layer, 1, nullptr});
  RegionFn fn = [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    return {in[0] * 2};
  };
  auto call = [&](std::int64_t step, std::int64_t microbatch) {
    ExecutionPointScope point(ExecutionPoint{step, microbatch, GraphPhase::eager});
    const at::Tensor x = at::full({3}, double(step + 2), at::kDouble);
    const at::Tensor y = runner->run_region("decoder.layers.0", fn, {x}, false)[0];
    EXPECT_TRUE(at::equal(y, x * 2)) << "step " << step;
  };
  call(-1, -1);
  call(0, 0);
  call(0, 1);
  EXPECT_FALSE(runner->graphs_created()) << "made during the record step";
  call(1, 0);
  EXPECT_TRUE(runner->graphs_created()) << "not made when step 1 called the region";
  ASSERT_EQ(runner->regions().size(), 1u);
  EXPECT_EQ(runner->regions()[0].replays, 1);
}

TEST(GraphPhasesPerLayer, ARegionFirstCalledAfterTheGraphsWereMadeIsNamed) {
  auto backend = make_backend("reference");
  auto runner_owner = backend->make_graph_runner();
  auto* runner = dynamic_cast<PhasedGraphRunner*>(runner_owner.get());
  ASSERT_NE(runner, nullptr);
  runner->configure(GraphOptions{GraphMode::per_layer, 1, nullptr});
  RegionFn fn = [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    return {in[0] + 1};
  };
  const at::Tensor x = at::zeros({2}, at::kDouble);
  {
    ExecutionPointScope point(ExecutionPoint{0, 0, GraphPhase::eager});
    runner->run_region("decoder.layers.0", fn, {x}, false);
  }
  runner->create_graphs();
  ExecutionPointScope point(ExecutionPoint{1, 0, GraphPhase::eager});
  try {
    runner->run_region("decoder.layers.1", fn, {x}, false);
    FAIL() << "an unrecorded region was run after the graphs were made";
  } catch (const std::logic_error& e) {
    // An internal error: where it was raised, then what went wrong.
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("harness/graphs/graph_runner.cpp:", 0), 0u) << what;
    EXPECT_NE(what.find(": graph region decoder.layers.1 was not recorded before the graphs were "
                        "created"),
              std::string::npos)
        << what;
  }
}

// ------------------------------------------------------------------ full-iteration
class GraphPhasesFullIteration : public ::testing::TestWithParam<RecomputeKind> {};

TEST_P(GraphPhasesFullIteration, ObservesNothingAfterCaptureAndLossesStayEager) {
  const int kSteps = 5, kMb = 2;
  ModelConfig c = graph_config();
  c.recompute = GetParam();
  c.recompute_layers = 1;
  if (c.recompute == RecomputeKind::selective) {
    c.recompute_modules = parse_recompute_modules("core_attn,mlp");
  }
  ModelConfig eager_cfg = graph_config();
  c.graphs = GraphMode::full_iteration;
  const GraphRun g = drive(c, kSteps, kMb);
  const GraphRun e = drive(eager_cfg, kSteps, kMb);
  expect_same_results(g, e);
  const size_t per_mb = static_cast<size_t>(6 * c.layers + 1);
  for (int step = 0; step < kSteps; ++step) {
    for (int mb = 0; mb < kMb; ++mb) {
      SCOPED_TRACE("step " + std::to_string(step) + " mb " + std::to_string(mb));
      auto gn = select(g, step, mb), en = select(e, step, mb);
      if (step < c.graph_warmup) {  // eager iterations: everything, normally
        ASSERT_EQ(gn.size(), per_mb);
        for (size_t k = 0; k < gn.size(); ++k) {
          EXPECT_EQ(gn[k]->phase, GraphPhase::eager);
          EXPECT_TRUE(at::equal(gn[k]->value, en[k]->value)) << gn[k]->owner << gn[k]->name;
        }
      } else if (step == c.graph_warmup) {  // capture: once per site, contents undefined
        ASSERT_EQ(gn.size(), per_mb);
        for (size_t k = 0; k < gn.size(); ++k) {
          EXPECT_EQ(gn[k]->phase, GraphPhase::capture);
          EXPECT_EQ(gn[k]->name, en[k]->name);
          EXPECT_TRUE(gn[k]->all_nan) << gn[k]->owner << " " << gn[k]->name;
        }
      } else {
        EXPECT_TRUE(gn.empty());  // replays: nothing at all
      }
    }
  }
  EXPECT_EQ(g.notes.size(), per_mb * kMb * (c.graph_warmup + 1));
}

INSTANTIATE_TEST_SUITE_P(Recompute, GraphPhasesFullIteration,
                         ::testing::Values(RecomputeKind::none, RecomputeKind::full_uniform,
                                           RecomputeKind::selective),
                         [](const auto& info) {
                           std::string s(to_string(info.param));
                           for (char& ch : s) ch = ch == '-' ? '_' : ch;
                           return s;
                         });

// ------------------------------------------------------------------ code-path faults
int count_notes(const GraphRun& r, GraphPhase phase, bool only_inside, bool with_step) {
  int n = 0;
  for (const Note& note : r.notes)
    n += note.phase == phase && (!only_inside || inside_site(note.kind)) &&
         (!with_step || note.step >= 0);
  return n;
}

// notify-on-replay: a replay's notifications reach the caller's observer (a
// real graph replay runs no host code), per-layer and full-iteration alike.
TEST(GraphPhasesFaults, NotifyOnReplayDeliversReplayNotifications) {
  for (GraphMode mode : {GraphMode::per_layer, GraphMode::full_iteration}) {
    SCOPED_TRACE(std::string(to_string(mode)));
    ModelConfig c = graph_config();
    c.graphs = mode;
    EXPECT_EQ(count_notes(drive(c, 4, 1), GraphPhase::replay, false, false), 0);
    CodePathFaultScope fault(fault_notify_on_replay);
    const GraphRun bad = drive(c, 4, 1);
    EXPECT_GT(count_notes(bad, GraphPhase::replay, true, true), 0);
  }
}

// warmup-counted-as-step: per-layer warmup runs carry the step that recorded
// the graphs instead of step -1 (between steps).
TEST(GraphPhasesFaults, WarmupCountedAsStepLabelsWarmupWithTheStep) {
  ModelConfig c = graph_config();
  c.graphs = GraphMode::per_layer;
  const GraphRun good = drive(c, 2, 1);
  EXPECT_GT(count_notes(good, GraphPhase::warmup, true, false), 0);
  EXPECT_EQ(count_notes(good, GraphPhase::warmup, false, true), 0);
  CodePathFaultScope fault(fault_warmup_counted_as_step);
  const GraphRun bad = drive(c, 2, 1);
  EXPECT_EQ(count_notes(bad, GraphPhase::warmup, false, true),
            count_notes(good, GraphPhase::warmup, false, false));
  EXPECT_EQ(count_notes(bad, GraphPhase::capture, false, true), 0) << "only the warmup moves";
}

// static-grad-aliasing: a replayed region hands its input gradients back in
// its static input buffers. Kept until the end of the step (interleaved: every
// forward, then every backward; or one microbatch after the other), the
// earlier microbatches' gradients are overwritten by later replays, so they
// differ from the eager run's; without the fault they are equal bit for bit.
TEST(GraphPhasesFaults, StaticGradAliasingOverwritesGradientsStillHeld) {
  ModelConfig c = graph_config();
  const ModelConfig eager_cfg = c;
  c.graphs = GraphMode::per_layer;
  for (bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "microbatch after microbatch");
    const GraphRun eager = drive(eager_cfg, 2, 3, interleaved);
    expect_same_results(drive(c, 2, 3, interleaved), eager);
    CodePathFaultScope fault(fault_static_grad_aliasing);
    const GraphRun bad = drive(c, 2, 3, interleaved);
    ASSERT_EQ(bad.steps[1].input_grad_norms.size(), eager.steps[1].input_grad_norms.size());
    int differ = 0;
    for (std::size_t i = 0; i < eager.steps[1].input_grad_norms.size(); ++i)
      differ +=
          bad.steps[1].input_grad_norms[i].second != eager.steps[1].input_grad_norms[i].second;
    EXPECT_GT(differ, 0) << "the replay step's held gradients were not overwritten";
    // Step 0 records eagerly: no replay, nothing to overwrite.
    for (std::size_t i = 0; i < eager.steps[0].input_grad_norms.size(); ++i)
      EXPECT_EQ(bad.steps[0].input_grad_norms[i].second, eager.steps[0].input_grad_norms[i].second);
  }
}

}  // namespace
}  // namespace parity
