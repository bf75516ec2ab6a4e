// The property evaluators of parity check on hand-built runs: the trace properties
// (exactly_once, graph_replay, recompute_invariance, determinism, collective_symmetry)
// and their tolerances and skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/checks/properties.h"
#include "tests/checks/hand_built_runs.h"

namespace parity::checks {
namespace {

using testing::eager_run;

TEST(Properties, ExactlyOncePassesOnAPlainEagerRun) {
  const CheckRun a = eager_run("a");
  EXPECT_EQ(check_exactly_once({&a}).status, Status::pass) << check_exactly_once({&a}).reason;
}

TEST(Properties, ADuplicatedObservationFailsExactlyOnce) {
  CheckRun a = eager_run("a");
  a.ranks[0].trace.push_back(a.ranks[0].trace[3]);
  const PropertyResult p = check_exactly_once({&a});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("2 observation(s) in phase eager, expected 1"), std::string::npos)
      << p.reason;
  EXPECT_EQ(p.worst_site, "decoder.layers.0.mlp.mlp_output");
  EXPECT_EQ(p.worst_label, "decoder.layers.0");
}

TEST(Properties, AMissingOrWarmupObservationFailsExactlyOnce) {
  CheckRun a = eager_run("a");
  a.ranks[0].trace.erase(a.ranks[0].trace.begin());
  EXPECT_EQ(check_exactly_once({&a}).status, Status::fail);
  CheckRun b = eager_run("b");
  b.ranks[0].trace.push_back(
      {0, -1, -1, "warmup", "decoder.layers.0.mlp.mlp_output", "mlp_output", "0x0"});
  EXPECT_EQ(check_exactly_once({&b}).status, Status::fail);
}

// `a`'s eager trace as per-layer graphs leave it: sites inside the graphed layer
// only on step 0 (phase record), silent on the replay steps.
// The four sites inside a graphed layer, notified between steps in `phase`.
void push_inside_sites(std::vector<Observation>& trace, const char* phase) {
  for (const auto& [site, kind] : std::vector<std::pair<std::string, std::string>>{
           {"decoder.layers.0.input_layernorm.layernorm_output", "layernorm_output"},
           {"decoder.layers.0.self_attention.attention_context", "attention_context"},
           {"decoder.layers.0.pre_mlp_layernorm.layernorm_output", "layernorm_output"},
           {"decoder.layers.0.mlp.mlp_output", "mlp_output"}})
    trace.push_back({0, -1, -1, phase, site, kind, "0x0"});
}

std::vector<Observation> record_step_trace(const CheckRun& a) {
  std::vector<Observation> trace;
  for (Observation o : a.ranks[0].trace) {
    const bool inside = captured_by_layer_graphs(a.config, o.site);
    if (inside && o.step >= 1) continue;
    if (inside) o.phase = "record";
    trace.push_back(o);
  }
  return trace;
}

TEST(Properties, PerLayerGraphsExpectInsideSitesOnlyOnTheRecordStep) {
  CheckRun a = eager_run("a");
  a.config.graphs = GraphMode::per_layer;
  a.config.graph_warmup = 1;
  std::vector<Observation> trace = record_step_trace(a);
  for (const char* phase : {"warmup", "capture"}) {
    push_inside_sites(trace, phase);
  }
  a.ranks[0].trace = trace;
  EXPECT_EQ(check_exactly_once({&a}).status, Status::pass) << check_exactly_once({&a}).reason;
  // An inside site notified on the replay step fails.
  a.ranks[0].trace.push_back(
      {0, 1, 0, "eager", "decoder.layers.0.mlp.mlp_output", "mlp_output", "0x0"});
  EXPECT_EQ(check_exactly_once({&a}).status, Status::fail);
}

TEST(Properties, RecomputeInvarianceWantsBitwiseObservations) {
  CheckRun a = eager_run("a"), c = eager_run("c");
  a.config.recompute = "full-uniform";
  EXPECT_EQ(check_recompute_invariance(a, c).status, Status::pass);
  a.ranks[0].trace[0].digest = "0xdead";
  const PropertyResult p = check_recompute_invariance(a, c);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_EQ(p.worst_site, "decoder.layers.0.residual_accumulator");
  CheckRun plain = eager_run("a");
  EXPECT_EQ(check_recompute_invariance(plain, c).status, Status::skip);
}

TEST(Properties, GradientsWithinToleranceButNotBeyond) {
  CheckRun a = eager_run("a", 1), c = eager_run("c", 1);
  a.config.recompute = "selective:mlp";
  a.ranks[0].steps[0].grads["w"] = "0xother";
  a.ranks[0].steps[0].grad_norms["w"] = 2.0 * (1 + 1e-8);
  EXPECT_EQ(check_recompute_invariance(a, c).status, Status::pass);
  a.ranks[0].steps[0].grad_norms["w"] = 2.0 * (1 + 1e-4);
  EXPECT_EQ(check_recompute_invariance(a, c).status, Status::fail);
}

TEST(Properties, Tolerances) {
  RunConfig fp64;
  fp64.dtype = ModelDType::fp64;
  EXPECT_TRUE(within(1.0, 1.0 + 1e-11, tolerances_for(fp64).metric));
  EXPECT_FALSE(within(1.0, 1.0 + 1e-9, tolerances_for(fp64).metric));
  EXPECT_TRUE(within(NAN, NAN, 1e-5));
  EXPECT_FALSE(within(NAN, 1.0, 1e-5));
  EXPECT_TRUE(within(INFINITY, INFINITY, 0));
}

TEST(Properties, GraphReplaySurfacesAliasingAndSilence) {
  CheckRun a = eager_run("a", 3), c = eager_run("c", 3);
  a.config.graphs = GraphMode::full_iteration;
  a.config.graph_warmup = 1;
  EXPECT_EQ(graph_replay_alias_failure("a", "prepared state aliases").status, Status::fail);
  // Full-iteration: eager observations in the capture iteration (step 1) and
  // any observation after it (step 2) fail.
  PropertyResult p = check_graph_replay(a, c);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("in the capture iteration"), std::string::npos) << p.reason;
  std::vector<Observation> kept;
  for (Observation o : a.ranks[0].trace) {
    if (o.step == 1) o.phase = "capture";
    kept.push_back(o);
  }
  a.ranks[0].trace = kept;
  p = check_graph_replay(a, c);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("after the capture"), std::string::npos) << p.reason;
  kept.clear();
  for (const Observation& o : a.ranks[0].trace)
    if (o.step != 2) kept.push_back(o);
  a.ranks[0].trace = kept;
  p = check_graph_replay(a, c);
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  CheckRun eager = eager_run("a");
  EXPECT_EQ(check_graph_replay(eager, c).status, Status::skip);
}

TEST(Properties, DeterminismAndCollectiveSymmetry) {
  CheckRun a = eager_run("a"), a2 = eager_run("a2");
  EXPECT_EQ(check_determinism(a, a2).status, Status::pass);
  a2.results[0]["rank"] = 1;
  EXPECT_EQ(check_determinism(a, a2).status, Status::fail);

  CheckRun two = eager_run("a");
  RankRun other = two.ranks[0];
  other.rank = 1;
  two.ranks[0].collectives["tp"] = {{0, 1}, 3, "0xabc"};
  other.collectives["tp"] = {{0, 1}, 3, "0xabc"};
  two.ranks.push_back(other);
  EXPECT_EQ(check_collective_symmetry({&two}).status, Status::pass);
  two.ranks[1].collectives["tp"].hash = "0xabd";
  const PropertyResult p = check_collective_symmetry({&two});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("tp group"), std::string::npos) << p.reason;
}

// exactly_once's order: a run with recompute observes, per (rank, step,
// microbatch), the sites of its no-recompute reference in the same order; one
// observation per site moved to the backward (after the logits) fails.
TEST(Properties, ExactlyOnceComparesTheForwardOrderWithTheReference) {
  CheckRun a = eager_run("a"), c = eager_run("c");
  a.config.recompute = "full-uniform";
  for (Observation& o : a.ranks[0].trace)
    o.grad_mode = o.kind == "output_logits";  // no-grad forward
  for (Observation& o : c.ranks[0].trace) o.grad_mode = true;
  PropertyResult p = check_exactly_once({&a, &c});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("2 (rank, step, microbatch) sequences in forward order, (a) vs (c)"),
            std::string::npos)
      << p.reason;
  // observe-recompute-not-forward: the layer's sites come after the logits.
  std::vector<Observation>& t = a.ranks[0].trace;
  std::rotate(t.begin(), t.begin() + 4, t.begin() + 5);
  p = check_exactly_once({&a, &c});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 microbatch 0: observation #0 is output_layer.output_logits"),
            std::string::npos)
      << p.reason;
  // A different sharding is no reference; without recompute or graphs nothing is ordered.
  CheckRun other = eager_run("c");
  other.config.tp = 2;
  EXPECT_EQ(check_exactly_once({&a, &other}).status, Status::pass);
}

// Without recompute (graphs only) the grad mode must match the reference too;
// per-layer replay steps compare only the sites outside the layer.
TEST(Properties, ExactlyOnceWithGraphsComparesGradModeAndOutsideSites) {
  CheckRun a = eager_run("a"), c = eager_run("c");
  a.config.graphs = GraphMode::per_layer;
  a.config.graph_warmup = 0;
  std::vector<Observation> trace = record_step_trace(a);
  push_inside_sites(trace, "capture");
  a.ranks[0].trace = trace;
  EXPECT_EQ(check_exactly_once({&a, &c}).status, Status::pass)
      << check_exactly_once({&a, &c}).reason;
  a.ranks[0].trace[0].grad_mode = true;
  const PropertyResult p = check_exactly_once({&a, &c});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("(forward order and grad mode)"), std::string::npos) << p.reason;
}

TEST(Properties, RecomputeInvarianceSkipsFullIterationGraphsWithoutWarmup) {
  CheckRun a = eager_run("a", 2), c = eager_run("c", 2);
  a.config.recompute = "full-uniform";
  a.config.graphs = GraphMode::full_iteration;
  a.config.graph_warmup = 0;
  for (Observation& o : a.ranks[0].trace) o.phase = o.step == 0 ? "capture" : "replay";
  const PropertyResult p = check_recompute_invariance(a, c);
  EXPECT_EQ(p.status, Status::skip);
  EXPECT_NE(p.reason.find("graph warmup 0"), std::string::npos) << p.reason;
}

// warmup-counted-as-step: a warmup observation labelled with a training step.
TEST(Properties, GraphReplayFailsOnAWarmupObservationWithAStep) {
  CheckRun a = eager_run("a"), c = eager_run("c");
  a.config.graphs = GraphMode::per_layer;
  std::vector<Observation> trace;
  for (Observation o : a.ranks[0].trace)
    if (!(captured_by_layer_graphs(a.config, o.site) && o.step >= 1)) trace.push_back(o);
  trace.push_back({0, -1, -1, "warmup", "decoder.layers.0.mlp.mlp_output", "mlp_output", "0x0"});
  a.ranks[0].trace = trace;
  EXPECT_EQ(check_graph_replay(a, c).status, Status::pass) << check_graph_replay(a, c).reason;
  a.ranks[0].trace.back().step = 0;
  const PropertyResult p = check_graph_replay(a, c);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("a warmup observation labelled step 0"), std::string::npos) << p.reason;
}

// contract.md section 5: tolerances follow the LOWEST precision the
// computation runs in (tolerance.h is the one place of that rule).
TEST(Tolerances, FollowTheLowestPrecisionTheComputationRunsIn) {
  RunConfig c;
  c.dtype = ModelDType::fp64;
  EXPECT_EQ(tolerances_for(c).precision, ModelDType::fp64);
  EXPECT_EQ(tolerances_for(c).gradient, 1e-12);
  EXPECT_EQ(tolerances_for(c).metric, 1e-10);
  EXPECT_EQ(tolerances_for(c).backend, 1e-10);
  c.fp32_residual = true;  // fp64 model, fp32 residual stream: fp32's rounding
  EXPECT_EQ(tolerances_for(c).precision, ModelDType::fp32);
  EXPECT_EQ(tolerances_for(c).gradient, 1e-6);
  EXPECT_EQ(tolerances_for(c).metric, 1e-5);
  EXPECT_EQ(tolerances_for(c).basis, "fp32 (fp64 model, fp32 residual stream)");
  c.dtype = ModelDType::bf16;  // an fp32 residual stream does not lift bf16
  EXPECT_EQ(tolerances_for(c).precision, ModelDType::bf16);
  EXPECT_EQ(tolerances_for(c).gradient, 1e-2);
  EXPECT_EQ(tolerances_for(c).backend, 2e-2);
  c.dtype = ModelDType::fp32;
  EXPECT_EQ(tolerances_for(c).precision, ModelDType::fp32);
  EXPECT_EQ(tolerances_for(c).basis, "fp32");
}

// A false alarm: an fp64 model with an fp32 residual stream and
// selective recompute differs from the run without it by fp32 rounding (loss
// rel 4e-10 on step 1, gradients rel 9e-8): within fp32 tolerances, not fp64's.
TEST(Properties, RecomputeInvarianceJudgesAnFp32ResidualStreamWithFp32Tolerances) {
  CheckRun a = eager_run("a", 2), c = eager_run("c", 2);
  for (CheckRun* r : {&a, &c}) {
    r->config.dtype = ModelDType::fp64;
    r->config.fp32_residual = true;
  }
  a.config.recompute = "selective:layernorm";
  a.ranks[0].steps[0].grads["w"] = "0xother";  // step 0's gradients differ: step 1's weights too
  a.ranks[0].steps[0].grad_norms["w"] = 2.0 * (1 + 9e-8);
  a.ranks[0].steps[1].loss = c.ranks[0].steps[1].loss * (1 + 4e-10);
  PropertyResult p = check_recompute_invariance(a, c);
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.note.find("fp32 (fp64 model, fp32 residual stream) rel 1e-06"), std::string::npos)
      << p.note;
  // Without the fp32 residual stream the same differences exceed fp64's tolerance.
  a.config.fp32_residual = c.config.fp32_residual = false;
  p = check_recompute_invariance(a, c);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("fp64 rel 1e-12"), std::string::npos) << p.reason;
}

// A vacuous pass: full-iteration graphs with steps <= warmup + 1 have
// no step after the capture: SKIP with the reason and how to make it compare.
TEST(Properties, GraphReplaySkipsWithoutAStepAfterTheCapture) {
  CheckRun a = eager_run("a", 2), c = eager_run("c", 2);
  a.config.graphs = GraphMode::full_iteration;
  a.config.graph_warmup = 1;
  std::vector<Observation> kept;
  for (Observation o : a.ranks[0].trace) {
    if (o.step == 1) o.phase = "capture";
    kept.push_back(o);
  }
  a.ranks[0].trace = kept;
  PropertyResult p = check_graph_replay(a, c);
  EXPECT_EQ(p.status, Status::skip) << p.reason;
  EXPECT_NE(p.reason.find("no step after the capture"), std::string::npos) << p.reason;
  EXPECT_EQ(p.hint, "use --steps 3");
  // Per-layer graphs with one step: step 0 records, nothing replays.
  CheckRun one = eager_run("a", 1), c1 = eager_run("c", 1);
  one.config.graphs = GraphMode::per_layer;
  one.ranks[0].trace = record_step_trace(one);
  p = check_graph_replay(one, c1);
  EXPECT_EQ(p.status, Status::skip) << p.reason;
  EXPECT_EQ(p.hint, "use --steps 2");
  // No graphs: SKIP, and the hint names the option.
  p = check_graph_replay(eager_run("a"), c);
  EXPECT_EQ(p.status, Status::skip);
  EXPECT_NE(p.hint.find("--graphs"), std::string::npos) << p.hint;
}

// Every SKIP of every property says how to make it compare; none is a PASS.
TEST(Properties, EverySkipSaysWhyAndHowToCompare) {
  const CheckRun a = eager_run("a"), c = eager_run("c");
  std::vector<PropertyResult> skipped = {check_recompute_invariance(a, c), check_graph_replay(a, c),
                                         check_collective_symmetry({&a})};
  CheckRun no_metrics = eager_run("a");
  for (StepData& d : no_metrics.ranks[0].steps) d.metrics.clear();
  skipped.push_back(check_sharded_reduction(c, {&no_metrics}, nullptr));
  for (const PropertyResult& p : skipped) {
    EXPECT_EQ(p.status, Status::skip) << p.name << ": " << p.reason;
    EXPECT_FALSE(p.reason.empty()) << p.name;
    EXPECT_NE(p.hint.find("use --"), std::string::npos) << p.name << ": " << p.hint;
  }
}

// One rank's groups have no peer: collective_symmetry compared nothing.
TEST(Properties, CollectiveSymmetrySkipsWhenEveryGroupHasOneMember) {
  const CheckRun a = eager_run("a");
  const PropertyResult p = check_collective_symmetry({&a});
  EXPECT_EQ(p.status, Status::skip) << p.reason;
  EXPECT_NE(p.reason.find("one member"), std::string::npos) << p.reason;
}

// A residual contribution computed with autograd on, or sharing the
// accumulator's storage, is invisible to metrics (they detach their input):
// exactly_once reads the trace's flags.
TEST(Properties, ExactlyOnceFailsOnAContributionThatRequiresGradOrAliases) {
  CheckRun a = eager_run("a");
  ASSERT_EQ(check_exactly_once({&a}).status, Status::pass);
  auto contribution = [](CheckRun& run) -> Observation& {
    for (Observation& o : run.ranks[0].trace)
      if (o.kind == "residual_contribution") return o;
    throw std::logic_error("no contribution");
  };
  contribution(a).requires_grad = true;
  PropertyResult p = check_exactly_once({&a});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("requires grad"), std::string::npos) << p.reason;
  EXPECT_EQ(p.worst_site, "decoder.layers.0.residual_contribution");
  CheckRun b = eager_run("b");
  contribution(b).aliases_accumulator = true;
  p = check_exactly_once({&b});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("shares storage with the accumulator"), std::string::npos) << p.reason;
}

}  // namespace
}  // namespace parity::checks
