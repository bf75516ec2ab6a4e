// The property evaluators of parity check on hand-built runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

#include "harness/checks/properties.h"

namespace parity::checks {
namespace {

// One rank, eager, `steps` x `microbatches`, one layer: 5 sites.
CheckRun eager_run(std::string name, int steps = 2, int microbatches = 1) {
  CheckRun run;
  run.name = std::move(name);
  run.config.layers = 1;
  run.config.steps = steps;
  run.config.microbatches = microbatches;
  RankRun r;
  const std::vector<std::pair<std::string, std::string>> sites = {
      {"decoder.layers.0.residual_accumulator", "residual_accumulator"},
      {"decoder.layers.0.residual_contribution", "residual_contribution"},
      {"decoder.layers.0.self_attention.attention_context", "attention_context"},
      {"decoder.layers.0.mlp.mlp_output", "mlp_output"},
      {"output_layer.output_logits", "output_logits"},
      // The layernorm probes last, so the indices the tests below use stay put.
      {"decoder.layers.0.input_layernorm.layernorm_output", "layernorm_output"},
      {"decoder.layers.0.pre_mlp_layernorm.layernorm_output", "layernorm_output"}};
  for (int s = 0; s < steps; ++s) {
    StepData d;
    d.loss = 1.5 - s;
    d.logits_digest = "0x1";
    d.grads["w"] = "0xa" + std::to_string(s);
    d.grad_norms["w"] = 2.0;
    d.metrics[{"layer-residual-accumulator-l2", "global"}] = 3.0 + s;
    r.steps.push_back(d);
    for (int m = 0; m < microbatches; ++m)
      for (const auto& [site, kind] : sites)
        r.trace.push_back({0, s, m, "eager", site, kind, "0x" + std::to_string(s * 10 + m)});
  }
  r.collectives["tp"] = {{0}, 3, "0xabc"};
  run.ranks.push_back(r);
  run.results = nlohmann::json::array({{{"rank", 0}}});
  return run;
}

TEST(Properties, ExactlyOncePassesOnAPlainEagerRun) {
  const CheckRun a = eager_run("a");
  EXPECT_EQ(check_exactly_once({&a}).status, Status::pass) << check_exactly_once({&a}).reason;
}

TEST(Properties, ADuplicatedObservationFailsExactlyOnce) {
  CheckRun a = eager_run("a");
  a.ranks[0].trace.push_back(a.ranks[0].trace[3]);
  const PropertyResult p = check_exactly_once({&a});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("2 observation(s) in phase eager, expected 1"), std::string::npos) << p.reason;
  EXPECT_EQ(p.worst_site, "decoder.layers.0.mlp.mlp_output");
  EXPECT_EQ(p.worst_label, "decoder.layers.0");
}

TEST(Properties, AMissingOrWarmupObservationFailsExactlyOnce) {
  CheckRun a = eager_run("a");
  a.ranks[0].trace.erase(a.ranks[0].trace.begin());
  EXPECT_EQ(check_exactly_once({&a}).status, Status::fail);
  CheckRun b = eager_run("b");
  b.ranks[0].trace.push_back({0, -1, -1, "warmup", "decoder.layers.0.mlp.mlp_output", "mlp_output", "0x0"});
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
  a.ranks[0].trace.push_back({0, 1, 0, "eager", "decoder.layers.0.mlp.mlp_output", "mlp_output", "0x0"});
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

TEST(Properties, ShardedReductionComparesEveryMetric) {
  CheckRun b = eager_run("b"), a = eager_run("a");
  a.config.metrics = {"layer-residual-accumulator-l2"};
  std::vector<MetricComparison> rows;
  EXPECT_EQ(check_sharded_reduction(b, {&a}, &rows).status, Status::pass);
  EXPECT_EQ(rows.size(), 2u);
  a.ranks[0].steps[1].metrics[{"layer-residual-accumulator-l2", "global"}] = 4.1;
  const PropertyResult p = check_sharded_reduction(b, {&a}, nullptr);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_EQ(p.worst_site, "layer-residual-accumulator-l2");
  EXPECT_EQ(p.worst_label, "global");
  EXPECT_NEAR(*p.max_abs, 0.1, 1e-12);
  a.config.metrics.clear();
  EXPECT_EQ(check_sharded_reduction(b, {&a}, nullptr).status, Status::skip);
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
  for (Observation& o : a.ranks[0].trace) o.grad_mode = o.kind == "output_logits";  // no-grad forward
  for (Observation& o : c.ranks[0].trace) o.grad_mode = true;
  PropertyResult p = check_exactly_once({&a, &c});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("2 (rank, step, microbatch) sequences in forward order, (a) vs (c)"),
            std::string::npos) << p.reason;
  // observe-recompute-not-forward: the layer's sites come after the logits.
  std::vector<Observation>& t = a.ranks[0].trace;
  std::rotate(t.begin(), t.begin() + 4, t.begin() + 5);
  p = check_exactly_once({&a, &c});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 microbatch 0: observation #0 is output_layer.output_logits"), std::string::npos)
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
  EXPECT_EQ(check_exactly_once({&a, &c}).status, Status::pass) << check_exactly_once({&a, &c}).reason;
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

// Issue 10's false alarm: an fp64 model with an fp32 residual stream and
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

// Issue 10's vacuous pass: full-iteration graphs with steps <= warmup + 1 have
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

// Issue 10: a residual contribution computed with autograd on, or sharing the
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

// replica_consistency on a hand-built tp 2 x dp 2 run: a TP shard's copies are
// the ranks with the same TP rank, a TP replica's copies are every rank.
// A hand-built tp 2 x dp 2 run (a), one step, holding a TP-replicated
// "norm.weight" and a TP-sharded "fc1.weight"; `step(rank)` fills each rank's step.
CheckRun tp2_dp2_run(const std::function<StepData(int rank)>& step) {
  CheckRun run;
  run.name = "a";
  run.config.dtype = ModelDType::fp64;
  run.config.tp = 2;
  run.config.dp = 2;
  for (int rank = 0; rank < 4; ++rank) {
    RankRun r;
    r.rank = rank;
    r.parameter_tp = {{"norm.weight", "replica"}, {"fc1.weight", "shard"}};
    r.steps.push_back(step(rank));
    run.ranks.push_back(r);
  }
  return run;
}

TEST(Properties, ReplicaConsistencyComparesEachPiecesCopies) {
  CheckRun run = tp2_dp2_run([](int rank) {
    StepData s;
    s.grads = {{"norm.weight", "n"}, {"fc1.weight", "w" + std::to_string(rank % 2)}};
    return s;
  });
  PropertyResult p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("3 replicated (step, parameter, piece) groups, 8 gradient copies"),
            std::string::npos)
      << p.reason;
  // A replica whose gradient was not reduced (rank 3 = tp 1, dp 1).
  run.ranks[3].steps[0].grads["norm.weight"] = "partial";
  p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 gradient norm.weight: rank 3 (tp=1, cp=0, dp=1) differs from its "
                          "replica on rank 0 (tp=0, cp=0, dp=0)"),
            std::string::npos)
      << p.reason;
  EXPECT_EQ(p.worst_site, "norm.weight");
  // One rank: nothing to compare.
  const CheckRun single = eager_run("b");
  p = check_replica_consistency({&single});
  EXPECT_EQ(p.status, Status::skip) << p.reason;
}

// pp 2 with tied embeddings: the first and the last stage each hold the word
// embeddings, whose values after every step must be equal (the gradients
// alone cannot show a copy that started apart: the embedding group sums them).
TEST(Properties, ReplicaConsistencyComparesThePipelineStagesEmbeddingCopies) {
  CheckRun run;
  run.name = "a";
  run.config.pp = 2;
  for (int rank = 0; rank < 2; ++rank) {
    RankRun r;
    r.rank = rank;
    r.stage = rank;
    r.parameter_tp = {{"embedding.word_embeddings.weight", "shard"}};
    StepData s;
    s.grads = {{"embedding.word_embeddings.weight", "g"}};
    s.shared_values = {{"embedding.word_embeddings.weight", "v"}};
    r.steps.push_back(s);
    run.ranks.push_back(r);
  }
  PropertyResult p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("2 values of the stages' word-embedding copies bitwise equal"),
            std::string::npos)
      << p.reason;
  run.ranks[1].steps[0].shared_values["embedding.word_embeddings.weight"] = "apart";
  p = check_replica_consistency({&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 value embedding.word_embeddings.weight: rank 1 (tp=0, cp=0, "
                          "dp=0, pp=1) differs from its replica on rank 0"),
            std::string::npos)
      << p.reason;
}

// sharded_gradients combines a TP-sharded parameter's pieces (one copy per TP
// rank) and takes a replica once, then compares with the single-rank norms.
TEST(Properties, ShardedGradientsCombinePiecesAndCompareWithTheSingleRankRun) {
  CheckRun single;
  single.name = "b";
  single.config.dtype = ModelDType::fp64;
  RankRun one;
  StepData want;
  want.loss = 2.5;
  want.grad_norms = {{"norm.weight", 0.5}, {"fc1.weight", 5.0}};
  one.steps.push_back(want);
  single.ranks.push_back(one);
  CheckRun run = tp2_dp2_run([](int rank) {
    StepData s;
    s.loss = 2.5;
    s.grad_norms = {{"norm.weight", 0.5}, {"fc1.weight", rank % 2 == 0 ? 3.0 : 4.0}};  // 3-4-5
    return s;
  });
  PropertyResult p = check_sharded_gradients(single, {&run});
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("3 losses and gradient norms"), std::string::npos) << p.reason;
  // Every gradient and the loss twice as large (a loss scaled by cp = 2).
  for (RankRun& r : run.ranks) {
    r.steps[0].loss *= 2;
    for (auto& [name, n] : r.steps[0].grad_norms) n *= 2;
  }
  p = check_sharded_gradients(single, {&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("(a) step 0 loss: 5 vs single-rank 2.5"), std::string::npos) << p.reason;
  EXPECT_EQ(p.worst_site, "loss");
  EXPECT_EQ(p.worst_label, "global");
  // Only one layer's gradient off: the report names the parameter and its layer.
  for (RankRun& r : run.ranks) {
    r.steps[0].loss /= 2;
    for (auto& [name, n] : r.steps[0].grad_norms) n /= 2;
    r.steps[0].grad_norms["decoder.layers.1.mlp.linear_fc1.weight"] = 1.0;
    r.parameter_tp["decoder.layers.1.mlp.linear_fc1.weight"] = "replica";
  }
  single.ranks[0].steps[0].grad_norms["decoder.layers.1.mlp.linear_fc1.weight"] = 2.0;
  p = check_sharded_gradients(single, {&run});
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_EQ(p.worst_site, "decoder.layers.1.mlp.linear_fc1.weight");
  EXPECT_EQ(p.worst_label, "decoder.layers.1");
  // No sharded run: SKIP.
  p = check_sharded_gradients(single, {&single});
  EXPECT_EQ(p.status, Status::skip) << p.reason;
}

// backend_parity on hand-built runs: (a) on another backend, (f) the reference.
// Every observation gets a summary; the backend's values move by `rel`.
std::pair<CheckRun, CheckRun> backend_runs(double rel = 0) {
  CheckRun a = eager_run("a"), f = eager_run("f");
  a.config.backend = "cuda";
  for (CheckRun* r : {&a, &f})
    for (Observation& o : r->ranks[0].trace) {
      o.numel = 100;
      o.sum = 3;
      o.sum_sq = 50;
    }
  for (Observation& o : a.ranks[0].trace) o.sum_sq *= 1 + rel;
  return {a, f};
}

TEST(Properties, BackendParityPassesWithinTheDtypeTolerance) {
  auto [a, f] = backend_runs(2e-6);  // fp32: rel 1e-5
  a.ranks[0].steps[1].loss *= 1 + 3e-6;
  const PropertyResult p = check_backend_parity(a, f);
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("cuda vs reference) within fp32 rel 1e-05"), std::string::npos)
      << p.reason;
  // The hand-built runs share their digests: every observation counts as bitwise.
  EXPECT_EQ(p.note, "14 of 14 observations bitwise equal");
}

TEST(Properties, BackendParityFailsNamingTheWorstValue) {
  auto [a, f] = backend_runs();
  a.ranks[0].trace[3].sum_sq *= 1 + 1e-3;  // mlp_output of step 0
  const PropertyResult p = check_backend_parity(a, f);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("step 0 mb 0 eager decoder.layers.0.mlp.mlp_output sum of squares"),
            std::string::npos)
      << p.reason;
  EXPECT_EQ(p.worst_site, "decoder.layers.0.mlp.mlp_output");
  ASSERT_TRUE(p.max_rel.has_value());
  EXPECT_NEAR(*p.max_rel, 1e-3, 1e-9);
}

TEST(Properties, BackendParityFailsOnADifferentObservationSequence) {
  auto [a, f] = backend_runs();
  std::swap(a.ranks[0].trace[1], a.ranks[0].trace[2]);
  const PropertyResult p = check_backend_parity(a, f);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("rank 0 observation 1: step 0 mb 0 eager "
                          "decoder.layers.0.self_attention.attention_context in (a)"),
            std::string::npos)
      << p.reason;
  a = backend_runs().first;
  a.ranks[0].steps[0].metrics.clear();
  EXPECT_NE(check_backend_parity(a, f).reason.find("missing in (a)"), std::string::npos);
}

// A sum may cancel to about zero: its error is judged against sqrt(n) * L2
// (each of n terms within rel tol), not against the sum itself.
TEST(Properties, BackendParityJudgesSumsAgainstTheirTerms) {
  auto [a, f] = backend_runs();
  f.ranks[0].trace[0].sum = 0;
  a.ranks[0].trace[0].sum = 5e-4;  // sqrt(100) * sqrt(50) * 1e-5 = 7.07e-4
  EXPECT_EQ(check_backend_parity(a, f).status, Status::pass) << check_backend_parity(a, f).reason;
  a.ranks[0].trace[0].sum = 1e-3;
  EXPECT_EQ(check_backend_parity(a, f).status, Status::fail);
}

// Inside a stream capture a device tensor holds nothing yet: only the
// sequence is compared in the capture and replay phases.
TEST(Properties, BackendParityComparesNoValuesInsideACapture) {
  auto [a, f] = backend_runs();
  for (CheckRun* r : {&a, &f}) r->ranks[0].trace[2].phase = "capture";
  a.ranks[0].trace[2].sum = a.ranks[0].trace[2].sum_sq = NAN;
  a.ranks[0].trace[2].numel = 0;
  EXPECT_EQ(check_backend_parity(a, f).status, Status::pass) << check_backend_parity(a, f).reason;
  f.ranks[0].trace[2].phase = "replay";
  EXPECT_EQ(check_backend_parity(a, f).status, Status::fail);
}

// router_invariance over what the router logs (--moe-per-layer-logging, field
// bug Megatron-LM #1984): the first MoE layer's logged statistics of step 0
// must not move when the padding tokens' ids do; the load-balancing loss and
// the expert load only where routing is not forced (forcing is off in (h)).
TEST(Properties, RouterInvarianceComparesTheFirstMoeLayersLoggedStatistics) {
  auto moe_run = [](std::string name, double z, double lb) {
    CheckRun run = eager_run(std::move(name), 1);
    run.config.layers = 2;
    run.config.moe_experts = 4;
    run.config.padding_fraction = 0.25;
    auto& m = run.ranks[0].steps[0].metrics;
    m[{"moe-z-loss", "decoder.layers.0"}] = z;
    m[{"moe-load-balancing-loss", "decoder.layers.0"}] = lb;
    m[{"moe-z-loss", "decoder.layers.1"}] = 7.0 * z;  // a later layer: not compared
    return run;
  };
  const CheckRun a = moe_run("a", 0.5, 0.25);
  const CheckRun same = moe_run("h", 0.5, 0.25);
  PropertyResult p = check_router_invariance(a, &same);
  EXPECT_EQ(p.status, Status::pass) << p.reason;
  EXPECT_NE(p.reason.find("2 logged router statistics"), std::string::npos) << p.reason;

  CheckRun later = moe_run("h", 0.5, 0.25);
  later.ranks[0].steps[0].metrics[{"moe-z-loss", "decoder.layers.1"}] = 1.0;
  EXPECT_EQ(check_router_invariance(a, &later).status, Status::pass);

  const CheckRun padded = moe_run("h", 0.5, 0.2500001);
  p = check_router_invariance(a, &padded);
  EXPECT_EQ(p.status, Status::fail);
  EXPECT_NE(p.reason.find("moe-load-balancing-loss [decoder.layers.0]"), std::string::npos)
      << p.reason;

  CheckRun forced = a;
  forced.config.moe_force_routing = ForcedRouting::random;
  EXPECT_EQ(check_router_invariance(forced, &padded).status, Status::pass);
  const CheckRun z_moved = moe_run("h", 0.5000001, 0.25);
  EXPECT_EQ(check_router_invariance(forced, &z_moved).status, Status::fail);
}

}  // namespace
}  // namespace parity::checks
