// The MoE block (harness/model/moe_layer.h) on one rank: its output against a
// direct per-token computation, its gradients against finite differences, the
// router's observation sites (raw logits under forcing, normalized scores,
// padding compaction), capacity dropping, the aux loss's gradient and the
// expert-bias update, and the MoE config rules.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "harness/backend/aux_loss_scaler.h"
#include "harness/backend/registry.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/moe_layer.h"
#include "harness/observation/execution_point.h"
#include "harness/observation/tensor_observation.h"
#include "harness/recompute/checkpoint.h"
#include "tests/backend/gradcheck.h"
#include "tests/support/model_configs.h"

PARITY_USES_FAULT(aux_loss_tracked_on_recompute);
PARITY_USES_FAULT(aux_loss_tracker_host_side);
PARITY_USES_FAULT(expert_load_count_ungated);
PARITY_USES_FAULT(observe_forced_logits);
PARITY_USES_FAULT(padding_included);

namespace parity {
namespace {

using testing::check_gradients;
using testing::random_leaf;
using testing::weighted_sum;

ModelConfig moe_config() {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.dtype = ModelDType::fp64;
  c.moe.experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden = 12;
  return c;
}

at::Tensor all_positions(std::int64_t seq) { return at::arange(seq, at::kLong); }

struct Site {
  std::string owner, name;
  SourceKind kind;
  at::Tensor tensor;
  OptionalDim tp, seq, batch;
};

std::vector<Site> observe_forward(const MoELayer& layer, const ModelRuntime& rt,
                                  const at::Tensor& x, std::int64_t seq) {
  std::vector<Site> seen;
  auto scope = capture_tensor_observations(
      [&](const ObservationOwner& o, std::string_view n, SourceKind k, const at::Tensor& t,
          OptionalDim tp, OptionalDim s, OptionalDim b) {
        seen.push_back({o.canonical_name(), std::string(n), k, t.detach().clone(), tp, s, b});
        EXPECT_FALSE(t.requires_grad()) << n;
      },
      KindSet{SourceKind::router_logits, SourceKind::router_scores});
  layer.forward(rt, x, all_positions(seq));
  return seen;
}

// The MoE output computed token by token from the same parameters: the router's
// top-k of softmax(x W^T), each selected expert's MLP weighted by its score.
TEST(MoELayer, OutputEqualsAPerTokenComputation) {
  auto backend = make_backend("reference");
  ModelConfig c = moe_config();
  ParameterFactory params(c, 0, 1);
  MoELayer layer("decoder.layers.0.mlp", &c, params, 0, 0, 1);
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 3).detach();
  const at::Tensor out = layer.forward(rt, x, all_positions(c.seq)).first;

  const std::vector<Parameter>& p = params.parameters();
  ASSERT_EQ(p.size(), 1u + 2u * 4u);  // router + fc1/fc2 per expert
  EXPECT_EQ(p[1].name, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight");
  EXPECT_EQ(p[1].expert, 0);
  EXPECT_EQ(p[8].expert, 3);
  const at::Tensor w = p[0].value.detach();
  const at::Tensor tokens = x.reshape({-1, c.hidden});
  at::Tensor want = at::zeros_like(tokens);
  for (std::int64_t t = 0; t < tokens.size(0); ++t) {
    const at::Tensor scores = at::softmax(at::matmul(w, tokens[t]), 0);
    const at::Tensor chosen = std::get<1>(at::topk(scores, 2));
    for (std::int64_t j = 0; j < 2; ++j) {
      const std::int64_t e = chosen[j].item<std::int64_t>();
      const at::Tensor h = at::gelu(at::matmul(p[1 + 2 * e].value.detach(), tokens[t]));
      want[t] += scores[e] * at::matmul(p[2 + 2 * e].value.detach(), h);
    }
  }
  EXPECT_TRUE(at::allclose(out.reshape({-1, c.hidden}), want, 1e-12, 1e-12))
      << (out.reshape({-1, c.hidden}) - want).abs().max().item<double>();
}

TEST(MoELayer, GradientsMatchFiniteDifferences) {
  auto backend = make_backend("reference");
  struct Variant {
    RouterScore score;
    bool seq_aux;
    double z_loss;
  };
  // Every score function, both aux-loss variants, the z-loss with each (a finite
  // difference check of all parameters costs seconds: three cover the pairs).
  for (const Variant& v :
       {Variant{RouterScore::softmax, false, 0.3}, Variant{RouterScore::sigmoid, true, 0.0},
        Variant{RouterScore::sqrt_softplus, true, 0.3}}) {
    ModelConfig c = moe_config();
    c.seq = 4;
    c.moe.score = v.score;
    c.moe.shared_expert_ffn = 8;
    c.moe.aux_loss_coef = 0.5;
    c.moe.seq_aux_loss = v.seq_aux;
    c.moe.z_loss_coef = v.z_loss;  // the z-loss joins the aux loss's node
    ParameterFactory params(c, 0, 1);
    MoELayer layer("decoder.layers.0.mlp", &c, params, 0, 0, 1);
    auto rng = backend->make_rng_tracker();
    ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
    rt.aux_loss_scale = 0.25;
    at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 4);
    std::vector<at::Tensor> leaves{x};
    for (Parameter& q : params.parameters()) leaves.push_back(q.value);
    // The aux loss enters through the output's backward (attach_aux_loss), so
    // the objective whose finite differences autograd must match is
    // weighted_sum(out) + scale * aux: its value adds the aux loss detached (a
    // second router call), its gradient comes from the output alone. Selection
    // is piecewise constant: perturbations of 1e-6 keep every routing decision
    // for these inputs.
    EXPECT_TRUE(check_gradients(
        [&] {
          const at::Tensor out = layer.forward(rt, x, all_positions(c.seq)).first;
          const at::Tensor aux = layer.router().forward(rt, x, all_positions(c.seq)).aux_loss;
          return weighted_sum(out) + aux.detach() * rt.aux_loss_scale;
        },
        leaves, 1e-6, 1e-7, 1e-5))
        << to_string(v.score) << (v.seq_aux ? " seq aux loss" : "") << " z-loss " << v.z_loss;
  }
}

// The load-balancing loss against Megatron's formula written out: per
// microbatch E * coef / (k * N^2) * sum_e P_e f_e over the valid tokens, and
// the sequence-level variant, the same per sequence averaged over the b
// sequences (tokens [s, b]: sequence j holds tokens j, j + b, ...).
TEST(TopKRouter, AuxLossIsMegatronsPerMicrobatchAndPerSequenceFormula) {
  auto backend = make_backend("reference");
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  ModelConfig c = moe_config();
  c.micro_batch = 3;
  c.moe.aux_loss_coef = 0.1;
  c.moe.padding_fraction = 0.25;  // 2 of 8 positions: excluded from P, f and N
  ParameterFactory params(c, 0, 1);
  TopKRouter router("decoder.layers.0.mlp.router", &c, params, 0);
  const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 5).detach();
  const at::Tensor scores =
      at::softmax(at::matmul(x.reshape({-1, c.hidden}), params.parameters()[0].value.t()), -1);
  const std::int64_t E = c.moe.experts, k = c.moe.topk, b = c.micro_batch;
  const std::int64_t valid_positions = c.seq - c.moe.padding_tokens(c.seq);
  auto loss_over = [&](const std::vector<std::int64_t>& tokens) {
    at::Tensor p = at::zeros({E}, at::kDouble), f = at::zeros({E}, at::kDouble);
    for (std::int64_t t : tokens) {
      p += scores[t];
      f.index_put_({std::get<1>(at::topk(scores[t], k))},
                   f.index({std::get<1>(at::topk(scores[t], k))}) + 1);
    }
    const double n = static_cast<double>(tokens.size());
    return (p * f).sum().item<double>() * E * c.moe.aux_loss_coef / (k * n * n);
  };
  std::vector<std::int64_t> all;
  std::vector<std::vector<std::int64_t>> per_seq(b);
  for (std::int64_t pos = 0; pos < valid_positions; ++pos)
    for (std::int64_t j = 0; j < b; ++j) {
      all.push_back(pos * b + j);
      per_seq[j].push_back(pos * b + j);
    }
  const double want_micro = loss_over(all);
  double want_seq = 0;
  for (const auto& tokens : per_seq) want_seq += loss_over(tokens) / static_cast<double>(b);

  const double micro = router.forward(rt, x, all_positions(c.seq)).aux_loss.item<double>();
  c.moe.seq_aux_loss = true;
  const double seq = router.forward(rt, x, all_positions(c.seq)).aux_loss.item<double>();
  EXPECT_NEAR(micro, want_micro, 1e-12 * want_micro);
  EXPECT_NEAR(seq, want_seq, 1e-12 * want_seq);
  EXPECT_GT(std::abs(seq - micro), 1e-6 * micro);  // the variants differ on these tokens
}

// The router z-loss against ST-MoE's formula written out: coef times the mean
// over the microbatch's valid tokens of logsumexp(logits)^2, added to the
// load-balancing loss on the same node.
TEST(TopKRouter, ZLossIsTheMeanSquaredLogsumexpOverTheValidTokens) {
  auto backend = make_backend("reference");
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  ModelConfig c = moe_config();
  c.moe.padding_fraction = 0.25;  // positions 6 and 7 of 8 are padding
  ParameterFactory params(c, 0, 1);
  TopKRouter router("decoder.layers.0.mlp.router", &c, params, 0);
  const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 6).detach();
  const at::Tensor logits = at::matmul(x, params.parameters()[0].value.t());  // [s, b, E]
  const std::int64_t valid = c.seq - c.moe.padding_tokens(c.seq);
  const at::Tensor lse = at::logsumexp(logits.narrow(0, 0, valid), -1);
  c.moe.z_loss_coef = 0.01;
  const double want = (lse * lse).mean().item<double>() * 0.01;
  EXPECT_NEAR(router.forward(rt, x, all_positions(c.seq)).aux_loss.item<double>(), want,
              1e-12 * want);
  c.moe.aux_loss_coef = 0.1;  // both: one scalar, the sum
  const double both = router.forward(rt, x, all_positions(c.seq)).aux_loss.item<double>();
  c.moe.z_loss_coef = 0.0;
  const double aux = router.forward(rt, x, all_positions(c.seq)).aux_loss.item<double>();
  EXPECT_NEAR(both, aux + want, 1e-12 * both);
  c.moe.aux_loss_coef = 0.0;
  EXPECT_FALSE(router.forward(rt, x, all_positions(c.seq)).aux_loss.defined());
}

// Megatron's MoE loss tracker: each forward execution adds the microbatch's
// losses into the persistent buffer (the same storage throughout), a
// recomputation adds nothing, begin_step zeroes it; and the three field-bug
// faults of this path (docs/field-bugs.md) each change exactly that.
TEST(TopKRouter, TrackerRecordsEachForwardOnceAndNeverARecomputation) {
  auto backend = make_backend("reference");
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  ModelConfig c = moe_config();
  c.moe.aux_loss_coef = 0.1;
  c.moe.z_loss_coef = 0.01;
  c.moe.per_layer_logging = true;
  ParameterFactory params(c, 0, 1);
  TopKRouter router("decoder.layers.0.mlp.router", &c, params, 0);
  const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 7).detach();
  const void* storage = router.step_tracked_losses().data_ptr();
  auto forward = [&] { return router.forward(rt, x, all_positions(c.seq)); };
  auto tracked = [&] { return router.step_tracked_losses().clone(); };

  at::Tensor once;
  {
    at::NoGradGuard no_grad;  // a checkpoint's forward runs without grad: it is the one recorded
    forward();
    once = tracked();
  }
  EXPECT_GT(once[0].item<double>(), 0.0);
  EXPECT_GT(once[1].item<double>(), 0.0);
  {
    RecomputationScope recomputing;
    forward();
  }
  EXPECT_TRUE(at::equal(tracked(), once));
  {
    CodePathFaultScope fault(fault_aux_loss_tracked_on_recompute);
    RecomputationScope recomputing;
    forward();
  }
  EXPECT_TRUE(at::allclose(tracked(), 2 * once, 1e-15, 0));
  router.begin_step();
  EXPECT_EQ(router.step_tracked_losses().abs().sum().item<double>(), 0.0);
  EXPECT_EQ(router.step_tracked_losses().data_ptr(), storage);  // zeroed in place
  {
    ExecutionPointScope replay(ExecutionPoint{1, 0, GraphPhase::replay});
    forward();  // a replay repeats the captured device add
    EXPECT_TRUE(at::equal(tracked(), once));
    CodePathFaultScope fault(fault_aux_loss_tracker_host_side);
    forward();  // host code does not run on a replay
    EXPECT_TRUE(at::equal(tracked(), once));
  }
  c.moe.per_layer_logging = false;
  forward();
  EXPECT_TRUE(at::equal(tracked(), once));  // nothing tracked without the logging
}

TEST(AuxLossScaler, PassesTheOutputGradientAndGivesTheAuxLossTheScale) {
  at::Tensor out = random_leaf({3}, 1);
  at::Tensor aux = random_leaf({}, 2);
  at::Tensor y = attach_aux_loss(out, aux, 0.125);
  EXPECT_TRUE(at::equal(y, out));
  (y * 2).sum().backward();
  EXPECT_TRUE(at::equal(out.grad(), at::full({3}, 2.0, at::kDouble)));
  EXPECT_EQ(aux.grad().item<double>(), 0.125);
  EXPECT_TRUE(attach_aux_loss(out, at::Tensor(), 1.0).is_same(out));  // no aux loss: no node
}

// megatron-reference 7.5: forced routing changes what routing sees, never
// what is observed.
TEST(TopKRouter, ObservesTheRawLogitsWhenRoutingIsForced) {
  auto backend = make_backend("reference");
  ModelConfig c = moe_config();
  ParameterFactory plain_params(c, 0, 1);
  MoELayer plain("decoder.layers.0.mlp", &c, plain_params, 0, 0, 1);
  ModelConfig forced_config = c;
  forced_config.moe.force_routing = ForcedRouting::random;
  ParameterFactory forced_params(forced_config, 0, 1);
  MoELayer forced("decoder.layers.0.mlp", &forced_config, forced_params, 0, 0, 1);
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 5).detach();
  const std::vector<Site> a = observe_forward(plain, rt, x, c.seq);
  const std::vector<Site> b = observe_forward(forced, rt, x, c.seq);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(at::equal(a[i].tensor, b[i].tensor)) << i;
  // ... while the routing differs (the outputs do).
  EXPECT_FALSE(at::equal(plain.forward(rt, x, all_positions(c.seq)).first,
                         forced.forward(rt, x, all_positions(c.seq)).first));
  // The fault observes the forced logits.
  CodePathFaultScope fault(fault_observe_forced_logits);
  const std::vector<Site> f = observe_forward(forced, rt, x, c.seq);
  EXPECT_FALSE(at::equal(f[0].tensor, b[0].tensor));
}

// megatron-reference 2.2, 7.4, 7.6: scores are distributions without grad; a
// padding mask compacts both sites to the valid tokens, populations on dim 0.
TEST(TopKRouter, SitesAreNormalizedAndCompactedToValidTokens) {
  auto backend = make_backend("reference");
  for (RouterScore score :
       {RouterScore::softmax, RouterScore::sigmoid, RouterScore::sqrt_softplus}) {
    ModelConfig c = moe_config();
    c.moe.score = score;
    c.moe.padding_fraction = 0.25;  // 2 of 8 positions
    ParameterFactory params(c, 0, 1);
    MoELayer layer("decoder.layers.0.mlp", &c, params, 0, 0, 1);
    auto rng = backend->make_rng_tracker();
    ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
    const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 6).detach();
    const std::vector<Site> seen = observe_forward(layer, rt, x, c.seq);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0].owner, "decoder.layers.0.mlp.router");
    EXPECT_EQ(seen[0].name, "router_logits");
    EXPECT_EQ(seen[1].name, "router_scores");
    const std::int64_t valid = (c.seq - 2) * c.micro_batch;
    for (const Site& s : seen) {
      EXPECT_EQ(s.tensor.sizes(), (std::vector<std::int64_t>{valid, 4}));
      EXPECT_EQ(s.seq, OptionalDim(0));
      EXPECT_EQ(s.batch, OptionalDim(0));
      EXPECT_EQ(s.tp, std::nullopt);
    }
    // The valid rows are the first (seq - 2) positions, every batch entry.
    const at::Tensor logits = at::matmul(x, params.parameters()[0].value.detach().t());
    EXPECT_TRUE(at::allclose(seen[0].tensor, logits.narrow(0, 0, c.seq - 2).reshape({valid, 4})));
    EXPECT_TRUE(at::allclose(seen[1].tensor.sum(-1), at::ones({valid}, at::kDouble)));
    // Fault padding-included: every token is observed.
    CodePathFaultScope fault(fault_padding_included);
    EXPECT_EQ(observe_forward(layer, rt, x, c.seq)[0].tensor.numel(), c.seq * c.micro_batch * 4);
  }
}

TEST(TopKRouter, CapacityKeepsEachExpertsHighestProbabilityTokens) {
  auto backend = make_backend("reference");
  ModelConfig c = moe_config();
  c.moe.capacity_factor = 0.5;  // ceil(2 * 16 / 4 * 0.5) = 4 tokens per expert
  ParameterFactory params(c, 0, 1);
  TopKRouter router("decoder.layers.0.mlp.router", &c, params, 0);
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 7).detach();
  const Routing r = router.forward(rt, x, all_positions(c.seq));
  const at::Tensor per_expert = r.routing_map.sum(0);
  EXPECT_TRUE((per_expert <= 4).all().item<bool>()) << per_expert;
  // Without capacity: the same top-k, some expert over 4.
  ModelConfig dropless = c;
  dropless.moe.capacity_factor = 0;
  ParameterFactory params2(dropless, 0, 1);
  TopKRouter all("decoder.layers.0.mlp.router", &dropless, params2, 0);
  const Routing d = all.forward(rt, x, all_positions(c.seq));
  EXPECT_TRUE((d.routing_map.sum(0) > 4).any().item<bool>());
  // Kept tokens are a subset, and per expert the kept ones outrank the dropped.
  EXPECT_TRUE(r.routing_map.logical_and(d.routing_map.logical_not()).any().item<bool>() == false);
  for (std::int64_t e = 0; e < 4; ++e) {
    const at::Tensor kept = r.routing_map.select(1, e), routed = d.routing_map.select(1, e);
    const at::Tensor dropped = routed.logical_and(kept.logical_not());
    if (!dropped.any().item<bool>() || !kept.any().item<bool>()) continue;
    const at::Tensor p = d.probs.select(1, e);
    EXPECT_GE(p.masked_select(kept).min().item<double>(),
              p.masked_select(dropped).max().item<double>());
  }
}

TEST(TopKRouter, ExpertBiasMovesTowardBalanceAfterAStep) {
  auto backend = make_backend("reference");
  ModelConfig c = moe_config();
  c.moe.expert_bias_rate = 0.5;
  c.moe.force_routing = ForcedRouting::biased;  // every token prefers experts 0 and 1
  ParameterFactory params(c, 0, 1);
  TopKRouter router("decoder.layers.0.mlp.router", &c, params, 0);
  auto rng = backend->make_rng_tracker();
  ModelRuntime rt{backend.get(), ParallelContext::single(), rng.get(), true};
  const at::Tensor x = random_leaf({c.seq, c.micro_batch, c.hidden}, 8).detach();
  const at::Tensor sixteen_on_0_and_1 = at::tensor({16.0, 16.0, 0.0, 0.0}, at::kDouble);
  {
    // A recomputation is not counted: the forward it repeats was.
    RecomputationScope recomputing;
    router.forward(rt, x, all_positions(c.seq));
  }
  EXPECT_EQ(router.step_tokens_per_expert().sum().item<double>(), 0.0);
  {
    // Fault expert-load-count-ungated (Automodel PR 3247): it is.
    CodePathFaultScope fault(fault_expert_load_count_ungated);
    RecomputationScope recomputing;
    router.forward(rt, x, all_positions(c.seq));
  }
  EXPECT_TRUE(at::equal(router.step_tokens_per_expert(), sixteen_on_0_and_1));
  for (GraphPhase phase : {GraphPhase::warmup, GraphPhase::capture}) {
    // A graph's warmup runs and its capture count (a capture records the add
    // its replays repeat) but run between steps: begin_step zeroes them.
    ExecutionPointScope point(ExecutionPoint{-1, -1, phase});
    router.forward(rt, x, all_positions(c.seq));
  }
  router.begin_step();
  EXPECT_EQ(router.step_tokens_per_expert().sum().item<double>(), 0.0);
  {
    // A checkpoint's no-grad forward is the execution that counts.
    at::NoGradGuard no_grad;
    router.forward(rt, x, all_positions(c.seq));
  }
  // 16 tokens, each on experts 0 and 1.
  EXPECT_TRUE(at::equal(router.step_tokens_per_expert(), sixteen_on_0_and_1))
      << router.step_tokens_per_expert();
  router.update_expert_bias(rt);
  const at::Tensor want = at::tensor({-0.5, -0.5, 0.5, 0.5}, at::kFloat);
  EXPECT_TRUE(at::equal(router.expert_bias(), want)) << router.expert_bias();
}

TEST(MoeConfig, RulesNameTheFieldTheValueAndTheRule) {
  auto first = [](const ModelConfig& c, int tp = 1, int ep = 1) {
    const auto v = c.violations(tp, 1, 2, ep);
    return v.empty() ? std::string()
                     : v.front().field + " = " + v.front().value + ": " + v.front().rule;
  };
  ModelConfig c = moe_config();
  c.dtype = ModelDType::fp32;
  EXPECT_EQ(first(c), "");
  ModelConfig k = c;
  k.moe.topk = 5;
  EXPECT_EQ(first(k), "moe_topk = 5: must be in [1, moe_experts = 4]");
  EXPECT_EQ(first(c, 1, 3), "moe_experts = 4: must be divisible by ep (3)");
  ModelConfig tp = c;
  EXPECT_EQ(first(tp, 2),
            "moe_experts = 4: MoE with tp > 1 needs sequence parallelism (as Megatron requires)");
  ModelConfig dense = testing::small_config<ModelConfig>();
  dense.moe.topk = 1;
  EXPECT_EQ(first(dense), "moe_topk = 1: needs moe_experts >= 2 (the model has no MoE layer)");
  ModelConfig pad = c;
  pad.moe.padding_fraction = 1.0;
  EXPECT_EQ(first(pad), "padding_fraction = 1: must be in [0, 1)");
  ModelConfig layers = c;
  layers.moe.layers = "every:x";
  EXPECT_EQ(first(layers),
            "moe_layers = every:x: expected all, every:N or a comma list of layer indices");
  layers.moe.layers = "5";
  EXPECT_EQ(first(layers), "moe_layers = 5: layer 5 does not exist (layers = 2)");
  layers.moe.layers = "every:2";
  EXPECT_TRUE(layers.moe.is_moe_layer(0, 2));
  EXPECT_FALSE(layers.moe.is_moe_layer(1, 2));
}

}  // namespace
}  // namespace parity
