// Activation recompute (contract.md section 3, recompute_invariance and
// exactly_once of section 5): every variant gives the same outputs, observations
// and gradients as no recompute on CPU; each site is observed once per
// microbatch; the checkpointed function runs twice with grad modes [false, true]
// and the recomputation is not observed; the code-path faults of the recompute
// path (missing-recompute-suspension, observe-recompute-not-forward,
// grad-mode-gating) change what is observed.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "harness/backend/registry.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/gpt_model.h"
#include "harness/observation/execution_point.h"
#include "harness/recompute/checkpoint.h"
#include "harness/runtime/runtime_faults.h"
#include "tests/support/model_configs.h"
#include "tests/support/rank_threads.h"

PARITY_USES_FAULT(grad_mode_gating);
PARITY_USES_FAULT(missing_recompute_suspension);
PARITY_USES_FAULT(observe_recompute_not_forward);

namespace parity {
namespace {

struct Seen {
  std::int64_t microbatch;
  std::string owner, name;
  SourceKind kind;
  at::Tensor tensor;
  bool grad_mode = false;  // at::GradMode at the notification
};

struct RunResult {
  std::vector<at::Tensor> logits;
  std::vector<double> losses;
  std::vector<Seen> seen;
  std::map<std::string, at::Tensor> grads;
  std::vector<RecomputeEvent> log;
};

ModelConfig base_config(ModelDType dtype, double dropout) {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.layers = 4;
  c.dtype = dtype;
  c.dropout = dropout;
  c.seed = 5;
  c.init_std = 0.2;
  return c;
}

// Two microbatches, forward + backward each, every site observed.
RunResult run(const ModelConfig& c, ParallelContext par = ParallelContext::single(),
              std::int64_t microbatches = 2) {
  RunResult r;
  auto backend = make_backend("reference");
  GPTModel model(c, *backend, par);
  const at::Tensor pos = model.local_positions();
  std::int64_t mb = 0;
  auto scope = capture_tensor_observations(
      [&](const ObservationOwner& o, std::string_view n, SourceKind k, const at::Tensor& t,
          OptionalDim, OptionalDim, OptionalDim) {
        r.seen.push_back(Seen{mb, o.canonical_name(), std::string(n), k, t.detach().clone(),
                              at::GradMode::is_enabled()});
      },
      KindSet::all());
  RecomputeLogScope log(&r.log);
  for (mb = 0; mb < microbatches; ++mb) {
    MicrobatchData d = microbatch_data(c.seed, model.global_microbatch(mb, microbatches), c.seq,
                                       c.micro_batch, c.vocab);
    at::Tensor logits = model.forward(model.slice_sequence(d.tokens), pos);
    at::Tensor loss = model.loss(logits, model.slice_sequence(d.labels));
    loss.backward();
    r.logits.push_back(logits.detach().clone());
    r.losses.push_back(loss.item<double>());
  }
  model.finalize_grads();
  for (Parameter& p : model.parameters()) r.grads[p.name] = p.value.grad().clone();
  return r;
}

struct Variant {
  std::string name;
  RecomputeKind kind;
  std::int64_t layers_n;
  RecomputeModules modules;
  std::int64_t regions_per_microbatch;  // checkpointed regions per microbatch (4 layers)
};

std::vector<Variant> variants() {
  auto mods = [](bool a, bool l, bool m) {
    RecomputeModules r;
    r.core_attn = a;
    r.layernorm = l;
    r.mlp = m;
    return r;
  };
  return {
      {"full_uniform_1", RecomputeKind::full_uniform, 1, {}, 4},
      {"full_uniform_2", RecomputeKind::full_uniform, 2, {}, 2},
      {"full_uniform_4", RecomputeKind::full_uniform, 4, {}, 1},
      {"full_block_1", RecomputeKind::full_block, 1, {}, 1},
      {"full_block_3", RecomputeKind::full_block, 3, {}, 3},
      {"selective_core_attn", RecomputeKind::selective, 1, mods(true, false, false), 4},
      {"selective_layernorm", RecomputeKind::selective, 1, mods(false, true, false), 8},
      {"selective_mlp", RecomputeKind::selective, 1, mods(false, false, true), 4},
      {"selective_all", RecomputeKind::selective, 1, mods(true, true, true), 16},
  };
}

ModelConfig with_variant(ModelConfig c, const Variant& v) {
  c.recompute = v.kind;
  c.recompute_layers = v.layers_n;
  c.recompute_modules = v.modules;
  return c;
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

// contract.md recompute_invariance: gradients bitwise wherever the accumulation
// order is unchanged, else within summation-order rounding (fp64 rel 1e-12,
// fp32 rel 1e-6). Only selective "layernorm" changes the order: the layer input
// gets three gradient contributions (two inside the norm, one from the residual)
// and the checkpoint sums the norm's two first, inside its reentrant backward.
bool bitwise_grads(const ModelConfig& c) {
  return !(c.recompute == RecomputeKind::selective && c.recompute_modules.layernorm);
}
void expect_grads_match(const std::map<std::string, at::Tensor>& got,
                        const std::map<std::string, at::Tensor>& want, const ModelConfig& c) {
  ASSERT_EQ(got.size(), want.size());
  const double tol = c.dtype == ModelDType::fp64 ? 1e-12 : 1e-6;
  for (const auto& [name, g] : want) {
    if (bitwise_grads(c)) {
      EXPECT_TRUE(at::equal(got.at(name), g)) << name << " rel " << rel_err(got.at(name), g);
    } else {
      EXPECT_LE(rel_err(got.at(name), g), tol) << name;
    }
  }
}

// Each site once per microbatch: 6 per layer + the logits.
void expect_exactly_once(const RunResult& r, const ModelConfig& c, std::int64_t microbatches) {
  std::map<std::tuple<std::int64_t, std::string, std::string>, int> count;
  for (const Seen& s : r.seen) ++count[{s.microbatch, s.owner, s.name}];
  EXPECT_EQ(count.size(), static_cast<size_t>(microbatches * (6 * c.layers + 1)));
  for (const auto& [key, n] : count) {
    EXPECT_EQ(n, 1) << std::get<1>(key) << " " << std::get<2>(key) << " microbatch "
                    << std::get<0>(key);
  }
}

struct Case {
  Variant variant;
  ModelDType dtype;
  double dropout;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.variant.name + "_" + std::string(to_string(info.param.dtype)) +
         (info.param.dropout > 0 ? "_dropout" : "");
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name({c, 0}); }

class RecomputeInvariance : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeInvariance, SameOutputsObservationsAndGradientsAsNoRecompute) {
  const Case k = GetParam();
  const ModelConfig plain_cfg = base_config(k.dtype, k.dropout);
  const ModelConfig cfg = with_variant(plain_cfg, k.variant);
  const RunResult plain = run(plain_cfg);
  const RunResult ckpt = run(cfg);

  // Outputs and every observation: bitwise (the forward is the same computation).
  ASSERT_EQ(ckpt.logits.size(), plain.logits.size());
  for (size_t i = 0; i < plain.logits.size(); ++i) {
    EXPECT_TRUE(at::equal(ckpt.logits[i], plain.logits[i])) << "logits " << i;
    EXPECT_EQ(ckpt.losses[i], plain.losses[i]);
  }
  ASSERT_EQ(ckpt.seen.size(), plain.seen.size());
  for (size_t i = 0; i < plain.seen.size(); ++i) {
    EXPECT_EQ(ckpt.seen[i].owner, plain.seen[i].owner) << i;
    EXPECT_EQ(ckpt.seen[i].name, plain.seen[i].name) << i;
    EXPECT_TRUE(at::equal(ckpt.seen[i].tensor, plain.seen[i].tensor))
        << plain.seen[i].owner << " " << plain.seen[i].name;
  }
  expect_exactly_once(ckpt, cfg, 2);
  // Gradients: bitwise (the recomputation replays the same ops in the same
  // order and each parameter gets one contribution per microbatch), except
  // selective layernorm: summation-order rounding.
  expect_grads_match(ckpt.grads, plain.grads, cfg);
  // The execution log: every checkpointed region ran twice per microbatch,
  // [no-grad forward (observed), grad recompute (suspended)], nothing else.
  ASSERT_EQ(ckpt.log.size(), static_cast<size_t>(2 * 2 * k.variant.regions_per_microbatch));
  std::map<std::string, std::vector<const RecomputeEvent*>> by_region;
  for (const RecomputeEvent& e : ckpt.log) by_region[e.name].push_back(&e);
  EXPECT_EQ(by_region.size(), static_cast<size_t>(k.variant.regions_per_microbatch));
  for (const auto& [name, events] : by_region) {
    ASSERT_EQ(events.size(), 4u) << name;  // two microbatches
    for (int mb = 0; mb < 2; ++mb) {
      const RecomputeEvent& fwd = *events[2 * mb];
      const RecomputeEvent& re = *events[2 * mb + 1];
      EXPECT_EQ(fwd.execution, RecomputeExecution::forward) << name;
      EXPECT_FALSE(fwd.grad_enabled) << name;
      EXPECT_TRUE(fwd.observations_live) << name;
      EXPECT_EQ(re.execution, RecomputeExecution::recompute) << name;
      EXPECT_TRUE(re.grad_enabled) << name;
      EXPECT_FALSE(re.observations_live) << name;
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const Variant& v : variants()) {
    for (ModelDType d : {ModelDType::fp64, ModelDType::fp32}) {
      for (double p : {0.0, 0.1}) out.push_back(Case{v, d, p});
    }
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Variants, RecomputeInvariance, ::testing::ValuesIn(all_cases()),
                         case_name);

// ------------------------------------------------------------------ negative control
// The sites observed, in notification order, as "mb:owner.name".
std::vector<std::string> sequence_of(const RunResult& r) {
  std::vector<std::string> out;
  for (const Seen& s : r.seen)
    out.push_back(std::to_string(s.microbatch) + ":" + s.owner + "." + s.name);
  return out;
}

int duplicated_sites(const RunResult& r) {
  std::map<std::tuple<std::int64_t, std::string, std::string>, int> count;
  for (const Seen& s : r.seen) ++count[{s.microbatch, s.owner, s.name}];
  int duplicated = 0;
  for (const auto& [key, n] : count) duplicated += n > 1;
  return duplicated;
}

TEST(RecomputeNegativeControl, MissingSuspensionObservesTheRecomputation) {
  bool registered = false;
  for (const FaultInfo& f : fault_registry()) {
    registered |= f.name == info(fault_missing_recompute_suspension).name;
  }
  EXPECT_TRUE(registered);
  for (const Variant& v : {variants()[1], variants()[5], variants()[6]}) {
    SCOPED_TRACE(v.name);
    const ModelConfig cfg = with_variant(base_config(ModelDType::fp64, 0.1), v);
    EXPECT_EQ(duplicated_sites(run(cfg)), 0) << "fault off: every site once";
    RunResult bad;
    {
      CodePathFaultScope fault(fault_missing_recompute_suspension);
      bad = run(cfg);
    }
    const int duplicated = duplicated_sites(bad);
    // Full recompute duplicates every site inside its chunks (6 per layer); core_attn
    // its probe; layernorm the layernorm_output probe of both norms (in
    // Megatron no site sits inside that region and the fault is invisible there).
    if (v.kind == RecomputeKind::full_uniform) {
      EXPECT_EQ(duplicated, 2 * 4 * 6);
    }
    if (v.modules.core_attn) {
      EXPECT_EQ(duplicated, 2 * 4);
    }
    if (v.modules.layernorm && !v.modules.core_attn) {
      EXPECT_EQ(duplicated, 2 * 4 * 2);
    }
    for (const RecomputeEvent& e : bad.log) {
      if (e.execution == RecomputeExecution::recompute) {
        EXPECT_TRUE(e.observations_live);
      }
    }
    // The gradients are still right: the fault only breaks exactly-once.
    const RunResult plain = run(base_config(ModelDType::fp64, 0.1));
    expect_grads_match(bad.grads, plain.grads, cfg);
  }
  EXPECT_FALSE(fault_active(fault_missing_recompute_suspension));
}

// observe-recompute-not-forward and grad-mode-gating keep one observation per
// site but move the checkpointed sites to the backward (after the logits) and
// observe them with grad mode on; without the fault the sequence is the one of
// no recompute, and the checkpointed sites are seen with grad mode off.
TEST(RecomputeNegativeControl, RecomputeObservedInsteadOfForwardMovesSitesToBackward) {
  const RunResult plain = run(base_config(ModelDType::fp64, 0.1));
  for (CodePathFault f : {fault_observe_recompute_not_forward, fault_grad_mode_gating}) {
    for (const Variant& v : {variants()[0], variants()[5], variants()[7]}) {
      SCOPED_TRACE(std::string(info(f).name) + " " + v.name);
      const ModelConfig cfg = with_variant(base_config(ModelDType::fp64, 0.1), v);
      const RunResult good = run(cfg);
      EXPECT_EQ(sequence_of(good), sequence_of(plain));
      int no_grad = 0;
      for (const Seen& s : good.seen) no_grad += !s.grad_mode;
      EXPECT_GT(no_grad, 0) << "the checkpointed forward is observed (under no-grad)";
      RunResult bad;
      {
        CodePathFaultScope fault(f);
        bad = run(cfg);
      }
      EXPECT_EQ(duplicated_sites(bad), 0);
      EXPECT_EQ(bad.seen.size(), plain.seen.size());
      EXPECT_NE(sequence_of(bad), sequence_of(plain));
      for (const Seen& s : bad.seen) EXPECT_TRUE(s.grad_mode) << s.owner << "." << s.name;
      for (const RecomputeEvent& e : bad.log) {
        if (e.execution == RecomputeExecution::recompute) {
          EXPECT_TRUE(e.observations_live);
        }
      }
      expect_grads_match(bad.grads, plain.grads, cfg);
    }
  }
}

// ------------------------------------------------------------------ the functions alone
struct Owner : ObservationOwner {
  std::string n = "probe.owner";
  const std::string& canonical_name() const override { return n; }
};

TEST(RecomputeCheckpoint, RunsTwiceNoGradThenGradObservedOnceAndRestoresRng) {
  auto backend = make_backend("reference");
  auto rng = backend->make_rng_tracker();
  rng->seed(3, 0);
  Owner owner;
  at::Tensor w = at::randn({6}, at::kDouble).requires_grad_(true);
  std::vector<bool> grad_modes;
  int observed = 0;
  CheckpointFn fn = [&](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    grad_modes.push_back(at::GradMode::is_enabled());
    at::Generator g = rng->generator(RngStream::data_parallel);
    at::Tensor y = backend->dropout((in[0] * w).sin(), 0.3, true, g);
    observe_tensor(owner, "y", SourceKind::mlp_output, y);
    return {y, in[0].cos()};
  };
  auto scope = capture_tensor_observations(
      [&](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&, OptionalDim,
          OptionalDim, OptionalDim) { ++observed; },
      KindSet::all());
  at::Tensor x0 = at::randn({4, 6}, at::kDouble);

  // Plain reference.
  RngSnapshot start = rng->snapshot();
  at::Tensor x = x0.clone().requires_grad_(true);
  auto plain = fn({x});
  (plain[0].sum() * 2 + plain[1].pow(2).sum()).backward();
  at::Tensor gx = x.grad().clone(), gw = w.grad().clone();
  w.mutable_grad() = at::Tensor();
  grad_modes.clear();
  observed = 0;

  rng->restore(start);
  at::Tensor xc = x0.clone().requires_grad_(true);
  auto outs = checkpoint(fn, {xc}, rng.get(), "probe");
  EXPECT_EQ(grad_modes, std::vector<bool>{false});
  EXPECT_EQ(observed, 1);
  EXPECT_TRUE(at::equal(outs[0], plain[0]));
  RngSnapshot after_forward = rng->snapshot();
  (outs[0].sum() * 2 + outs[1].pow(2).sum()).backward();
  EXPECT_EQ(grad_modes, (std::vector<bool>{false, true}));
  EXPECT_EQ(observed, 1);  // the recomputation is suspended
  EXPECT_TRUE(at::equal(xc.grad(), gx));
  EXPECT_TRUE(at::equal(w.grad(), gw));                     // the dropout mask was reproduced
  EXPECT_EQ(rng->snapshot().states, after_forward.states);  // the tracker is put back

  // Graph warmup/capture: bypassed, run once with grad on.
  grad_modes.clear();
  {
    GraphPhaseScope warmup(GraphPhase::warmup);
    auto direct = checkpoint(fn, {xc}, rng.get(), "probe");
    EXPECT_TRUE(direct[0].requires_grad());
  }
  EXPECT_EQ(grad_modes, std::vector<bool>{true});
  EXPECT_EQ(observed, 2);
}

TEST(RecomputeCheckpointWithoutOutput, FreesTheOutputAndRefillsItBeforeTheConsumerBackward) {
  auto backend = make_backend("reference");
  auto rng = backend->make_rng_tracker();
  rng->seed(4, 0);
  at::Tensor nw = at::randn({6}, at::kDouble).add_(1).requires_grad_(true);
  at::Tensor nb = at::randn({6}, at::kDouble).requires_grad_(true);
  at::Tensor lw = at::randn({5, 6}, at::kDouble).requires_grad_(true);
  std::vector<bool> grad_modes;
  auto norm = [&](const at::Tensor& t) {
    grad_modes.push_back(at::GradMode::is_enabled());
    return backend->layer_norm(t, nw, nb, 1e-5);
  };
  at::Tensor x0 = at::randn({3, 2, 6}, at::kDouble);
  auto run_once = [&](bool ckpt) {
    for (at::Tensor* p : {&nw, &nb, &lw}) p->mutable_grad() = at::Tensor();
    at::Tensor x = x0.clone().requires_grad_(true);
    CheckpointWithoutOutput c(rng.get(), "norm");
    at::Tensor ln = ckpt ? c.checkpoint(norm, x) : norm(x);
    at::Tensor y = backend->linear(ln, lw, at::Tensor());  // saves ln for lw's gradient
    if (ckpt) {
      c.discard_output_and_register_recompute(y);
      EXPECT_TRUE(c.output_discarded());
      EXPECT_EQ(ln.storage().nbytes(), 0u);  // the memory is really gone
    }
    (y.pow(2).sum() + x.sum()).backward();
    if (ckpt) {
      EXPECT_FALSE(c.output_discarded());
    }
    return std::vector<at::Tensor>{x.grad().clone(), nw.grad().clone(), nb.grad().clone(),
                                   lw.grad().clone()};
  };
  auto plain = run_once(false);
  grad_modes.clear();
  auto ckpt = run_once(true);
  EXPECT_EQ(grad_modes, (std::vector<bool>{false, true}));
  // The parameters' gradients are bitwise; the input's three contributions
  // (two inside the norm, x.sum()) are summed in another order: rounding.
  EXPECT_LE(rel_err(ckpt[0], plain[0]), 1e-12);
  for (size_t i = 1; i < plain.size(); ++i) EXPECT_TRUE(at::equal(ckpt[i], plain[i])) << i;
}

// A function whose output views its input (a reshape): the output gets storage of its own
// before it is discarded, so discarding never frees the input.
TEST(RecomputeCheckpointWithoutOutput, AnOutputViewingTheInputIsCopiedBeforeItIsDiscarded) {
  at::Tensor x = at::arange(6, at::kDouble).reshape({2, 3}).requires_grad_(true);
  const at::Tensor before = x.detach().clone();
  CheckpointWithoutOutput c(nullptr, "reshape");
  at::Tensor flat = c.checkpoint([](const at::Tensor& t) { return t.reshape({-1}); }, x);
  at::Tensor y = flat * flat;
  c.discard_output_and_register_recompute(y);
  ASSERT_GT(x.storage().nbytes(), 0u) << "discarding the output freed the input";
  EXPECT_TRUE(at::equal(x.detach(), before));
  y.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), 2 * before));
}

// ------------------------------------------------------------------ TP = 2 + SP, thread ranks
// Every rank's run(c) on thread ranks at TP = tp; "" from report() when none threw.
auto run_tp(const ModelConfig& c, int tp) {
  return testing::run_model_ranks(ParallelTopology(tp, 1, 1),
                                  [&](ParallelContext par) { return run(c, par); });
}

TEST(RecomputeInvarianceParallel, TensorParallelWithSequenceParallelAndDropout) {
  at::set_num_threads(1);
  ModelConfig plain_cfg = base_config(ModelDType::fp64, 0.1);
  plain_cfg.sequence_parallel = true;
  plain_cfg.layers = 2;
  const auto plain_ranks = run_tp(plain_cfg, 2);
  ASSERT_EQ(plain_ranks.report(), "");
  const std::vector<RunResult>& plain = plain_ranks.results;
  for (const Variant& v :
       {Variant{"full_uniform_1", RecomputeKind::full_uniform, 1, {}, 2},
        Variant{"selective_all", RecomputeKind::selective, 1, variants()[8].modules, 8}}) {
    SCOPED_TRACE(v.name);
    const auto ckpt_ranks = run_tp(with_variant(plain_cfg, v), 2);
    ASSERT_EQ(ckpt_ranks.report(), "");
    const std::vector<RunResult>& ckpt = ckpt_ranks.results;
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      for (size_t i = 0; i < plain[rank].logits.size(); ++i) {
        EXPECT_TRUE(at::equal(ckpt[rank].logits[i], plain[rank].logits[i]));
      }
      ASSERT_EQ(ckpt[rank].seen.size(), plain[rank].seen.size());
      for (size_t i = 0; i < plain[rank].seen.size(); ++i) {
        EXPECT_TRUE(at::equal(ckpt[rank].seen[i].tensor, plain[rank].seen[i].tensor))
            << plain[rank].seen[i].owner << " " << plain[rank].seen[i].name;
      }
      expect_exactly_once(ckpt[rank], plain_cfg, 2);
      expect_grads_match(ckpt[rank].grads, plain[rank].grads, with_variant(plain_cfg, v));
    }
  }
}

TEST(RecomputeConfig, ValidationRules) {
  auto field_of = [](ModelConfig c) -> std::string {
    try {
      c.validate(1, 1, 1);
    } catch (const ModelConfigError& e) {
      return e.field();
    }
    return "";
  };
  ModelConfig c = base_config(ModelDType::fp32, 0);
  c.recompute = RecomputeKind::full_uniform;
  c.recompute_layers = 3;  // 4 layers
  EXPECT_EQ(field_of(c), "recompute_layers");
  c.recompute_layers = 2;
  EXPECT_EQ(field_of(c), "");
  c.recompute = RecomputeKind::full_block;
  c.recompute_layers = 5;
  EXPECT_EQ(field_of(c), "recompute_layers");
  c.recompute_layers = 0;
  EXPECT_EQ(field_of(c), "recompute_layers");
  c.recompute_layers = 1;
  c.graphs = GraphMode::per_layer;
  EXPECT_EQ(field_of(c), "recompute");
  c.graphs = GraphMode::full_iteration;
  EXPECT_EQ(field_of(c), "");
  c.recompute = RecomputeKind::selective;
  EXPECT_EQ(field_of(c), "recompute_modules");
  c.recompute_modules = parse_recompute_modules("layernorm,mlp");
  EXPECT_EQ(field_of(c), "");
  EXPECT_EQ(to_string(c.recompute_modules), "layernorm,mlp");
  try {
    parse_recompute_modules("core_attn,router");
    FAIL();
  } catch (const ModelConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "model config: recompute_modules = router: unknown module (known: core_attn, "
                 "layernorm, mlp, moe)");
  }
  EXPECT_TRUE(parse_recompute_modules("core_attn,moe").moe);
}

}  // namespace
}  // namespace parity
