// Sharded runs equal the single-rank run over the same global batch: thread
// ranks over the Gloo transport, TP x CP x DP (x SP), fp64, two microbatches per
// DP rank. Logits, the loss, every gradient (gathered back to the full tensor)
// and every observation (reassembled over TP by its tp_shard_dim, compared with
// this rank's CP rows) agree within 1e-10 relative. Rank threads only compute and
// return; all assertions run on the test thread after join.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <ATen/Parallel.h>

#include "harness/backend/registry.h"
#include "harness/model/gpt_model.h"
#include "tests/support/model_configs.h"
#include "tests/support/rank_threads.h"

namespace parity {
namespace {

struct Observed {
  std::string owner;
  std::string name;
  SourceKind kind;
  OptionalDim tp, seq, batch;
  at::Tensor tensor;  // reassembled over TP
};

struct MicrobatchResult {
  std::int64_t global_index = 0;
  at::Tensor positions;        // this rank's global sequence positions
  at::Tensor logits;           // full vocab, this rank's positions
  at::Tensor gathered_logits;  // from the runtime-gather forward (microbatch 0 only)
  std::vector<Observed> observed;
  std::vector<std::vector<std::int64_t>> local_shapes;
};

struct RankResult {
  double loss = 0;                          // the global loss (all-reduced over CP and DP)
  std::map<std::string, at::Tensor> grads;  // full tensors
  std::vector<MicrobatchResult> microbatches;
};

ModelConfig parallel_config(bool sp, ActivationKind act, NormKind norm) {
  ModelConfig c = testing::small_config<ModelConfig>();
  c.dtype = ModelDType::fp64;
  c.seed = 99;
  c.init_std = 0.2;
  c.sequence_parallel = sp;
  c.activation = act;
  c.norm = norm;
  return c;
}

// Gathers a TP-sharded tensor back to the full one (identity without TP).
at::Tensor reassemble(Communicator* tp, const at::Tensor& local, OptionalDim dim) {
  if (tp == nullptr || tp->size() == 1 || !dim.has_value()) return local.detach().clone();
  const std::int64_t d = *dim < 0 ? *dim + local.dim() : *dim;
  return tp->all_gather(local.detach().contiguous(), d);
}

double all_reduce_scalar(Communicator* c, double v) {
  if (c == nullptr || c->size() == 1) return v;
  return c->all_reduce(at::tensor({v}, at::kDouble), ReduceOp::sum).item<double>();
}

// One rank's (or the single rank's) step: `microbatches` microbatches of this
// rank's DP slice, each this rank's CP slice; the loss is the rank's share of the
// mean over every token of the global batch, so finalize_grads' sums give the
// global gradient.
RankResult run_model(const ModelConfig& c, ParallelContext par, std::int64_t microbatches) {
  RankResult r;
  auto backend = make_backend("reference");
  GPTModel model(c, *backend, par);
  const double global_tokens = double(c.tokens_per_sequence()) * double(c.micro_batch) *
                               double(microbatches) * par.dp_size();
  const at::Tensor pos = model.local_positions();
  double loss_share = 0;
  for (std::int64_t m = 0; m < microbatches; ++m) {
    MicrobatchResult mb;
    mb.global_index = model.global_microbatch(m, microbatches);
    mb.positions = pos;
    MicrobatchData d = model.microbatch(mb.global_index);
    at::Tensor tokens = model.slice_sequence(d.tokens), labels = model.slice_sequence(d.labels);
    std::vector<Observed> raw;
    at::Tensor logits;
    {
      auto scope = capture_tensor_observations(
          [&](const ObservationOwner& o, std::string_view n, SourceKind k, const at::Tensor& t,
              OptionalDim tp, OptionalDim seq, OptionalDim batch) {
            raw.push_back(Observed{o.canonical_name(), std::string(n), k, tp, seq, batch,
                                   t.detach().clone()});
          },
          KindSet::all());
      logits = model.forward(tokens, pos);
    }
    at::Tensor loss = model.token_losses(logits, labels).sum() / global_tokens;
    loss.backward();
    loss_share += loss.item<double>();
    mb.logits = reassemble(par.tp, logits, -1);
    for (Observed& o : raw) {
      mb.local_shapes.push_back(o.tensor.sizes().vec());
      o.tensor = reassemble(par.tp, o.tensor, o.tp);
      mb.observed.push_back(std::move(o));
    }
    if (m == 0) {  // the runtime gather override: full logits from every rank
      at::NoGradGuard no_grad;
      mb.gathered_logits = model.forward(tokens, pos, /*runtime_gather_output=*/true).clone();
    }
    r.microbatches.push_back(std::move(mb));
  }
  model.finalize_grads();
  r.loss = all_reduce_scalar(par.dp, all_reduce_scalar(par.cp, loss_share));
  for (Parameter& p : model.parameters()) {
    at::Tensor g = p.value.grad();
    // A routed expert's pieces lie over the expert TP group.
    Communicator* tp = p.expert >= 0 ? par.expert_tp() : par.tp;
    if (p.shard.replicated() || ParallelContext::size_of(tp) == 1) {
      r.grads[p.name] = g.clone();
    } else {
      at::Tensor all = tp->all_gather(g.contiguous(), p.shard.dim);
      auto pieces = all.chunk(tp->size(), p.shard.dim);
      r.grads[p.name] = unshard(std::vector<at::Tensor>(pieces.begin(), pieces.end()), p.shard);
    }
  }
  return r;
}

// Which rows of a rank's tensors hold tokens (`local`) and where the
// single-rank run holds the same tokens (`single`): with packed documents the
// rank's layout pads each to 2 x cp and the single rank's does not.
struct TokenRows {
  at::Tensor local, single;
};
TokenRows token_rows(const ModelConfig& c, int cp, const at::Tensor& positions) {
  if (!c.packed()) return {at::arange(positions.size(0), at::kLong), positions};
  const SequencePacking mine = pack_sequences(c.packed_seq_lengths, c.seq, cp);
  const SequencePacking one = pack_sequences(c.packed_seq_lengths, c.seq, 1);
  const PackedPositionTables t = packed_position_tables(mine, at::kCPU);
  const at::Tensor local = t.valid_of(positions).nonzero().squeeze(1);
  const at::Tensor held = positions.index_select(0, local);
  const at::Tensor starts = at::tensor(one.padded_starts, at::kLong);
  return {local, starts.index_select(0, t.documents_of(held)) +
                     t.position_in_document.index_select(0, held)};
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

struct Case {
  int tp, cp, dp;
  bool sp;
  ActivationKind act;
  NormKind norm;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "tp" + std::to_string(c.tp) + "_cp" + std::to_string(c.cp) + "_dp" + std::to_string(c.dp) +
         (c.sp ? "_sp_" : "_") + std::string(to_string(c.act)) + "_" +
         std::string(to_string(c.norm));
}
void PrintTo(const Case& c, std::ostream* os) { *os << case_name({c, 0}); }

class ShardedModel : public ::testing::TestWithParam<Case> {};

// The model `c` sharded over tp x cp x dp (SP as c says) against the same
// model on one rank over the same global batch: loss, every gradient, the
// logits and every observation.
void expect_sharded_run_equals_single_rank_run(const ModelConfig& c, int tp, int cp, int dp) {
  at::set_num_threads(1);  // thread ranks on a few cores
  constexpr std::int64_t kMicrobatches = 2;
  ModelConfig single_cfg = c;
  single_cfg.sequence_parallel = false;
  // The single rank runs the whole global batch: dp * microbatches microbatches.
  const RankResult single = run_model(single_cfg, ParallelContext::single(), dp * kMicrobatches);
  const auto sharded = testing::run_model_ranks(
      ParallelTopology(tp, cp, dp),
      [&](ParallelContext par) { return run_model(c, par, kMicrobatches); });
  ASSERT_EQ(sharded.report(), "");
  const std::vector<RankResult>& ranks = sharded.results;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankResult& r = ranks[rank];
    EXPECT_NEAR(r.loss, single.loss, 1e-10 * std::abs(single.loss));
    ASSERT_EQ(r.grads.size(), single.grads.size());
    for (const auto& [name, g] : single.grads) {
      ASSERT_TRUE(r.grads.at(name).defined()) << name;
      EXPECT_LT(rel_err(r.grads.at(name), g), 1e-10) << name;
    }
    ASSERT_EQ(r.microbatches.size(), static_cast<size_t>(kMicrobatches));
    for (const MicrobatchResult& mb : r.microbatches) {
      SCOPED_TRACE("global microbatch " + std::to_string(mb.global_index));
      const MicrobatchResult& s = single.microbatches.at(mb.global_index);
      const TokenRows token = token_rows(c, cp, mb.positions);
      auto rows = [&](const at::Tensor& t) { return t.index_select(0, token.single); };
      auto mine = [&](const at::Tensor& t) { return t.index_select(0, token.local); };
      EXPECT_LT(rel_err(mine(mb.logits), rows(s.logits)), 1e-10);
      if (mb.gathered_logits.defined()) {
        EXPECT_LT(rel_err(mine(mb.gathered_logits), rows(s.logits)), 1e-10);
      }
      // Observations: the same sites in the same order; labels per SP; the
      // tensors reassembled over TP equal this rank's rows of the single-rank ones.
      ASSERT_EQ(mb.observed.size(), s.observed.size());
      for (size_t i = 0; i < mb.observed.size(); ++i) {
        const Observed& o = mb.observed[i];
        const Observed& so = s.observed[i];
        SCOPED_TRACE(o.owner + " " + o.name);
        EXPECT_EQ(o.owner, so.owner);
        EXPECT_EQ(o.kind, so.kind);
        EXPECT_EQ(o.seq, OptionalDim(0));
        EXPECT_EQ(o.batch, OptionalDim(1));
        OptionalDim expect_tp;
        switch (o.kind) {
          case SourceKind::attention_context:
          case SourceKind::output_logits:
            expect_tp = -1;
            break;
          default:
            expect_tp = c.sequence_parallel ? OptionalDim(0) : std::nullopt;
        }
        EXPECT_EQ(o.tp, expect_tp);
        const at::Tensor expect = rows(so.tensor);
        ASSERT_EQ(mine(o.tensor).sizes(), expect.sizes());
        EXPECT_LT(rel_err(mine(o.tensor), expect), 1e-10);
        // Local shapes: sharded over TP exactly where the label says.
        const auto& local = mb.local_shapes[i];
        if (o.tp.has_value()) {
          const std::int64_t d = *o.tp < 0 ? *o.tp + o.tensor.dim() : *o.tp;
          EXPECT_EQ(local[d] * tp, o.tensor.size(d));
        } else {
          EXPECT_EQ(local, o.tensor.sizes().vec());
        }
      }
    }
  }
}

TEST_P(ShardedModel, EqualsTheSingleRankRunInFp64) {
  const Case k = GetParam();
  expect_sharded_run_equals_single_rank_run(parallel_config(k.sp, k.act, k.norm), k.tp, k.cp, k.dp);
}

// The whole layout matrix: TP in {1,2,4} x SP (where TP > 1) x CP in {1,2}
// x DP in {1,2}, the single-rank layout excluded (it is the reference). Norm and
// activation alternate so both kinds meet every parallel axis.
std::vector<Case> full_matrix() {
  std::vector<Case> cases;
  for (int tp : {1, 2, 4})
    for (bool sp : {false, true})
      for (int cp : {1, 2})
        for (int dp : {1, 2}) {
          if ((sp && tp == 1) || tp * cp * dp == 1) continue;
          const bool odd = cases.size() % 2 == 1;
          cases.push_back(Case{tp, cp, dp, sp, odd ? ActivationKind::swiglu : ActivationKind::gelu,
                               odd ? NormKind::rms_norm : NormKind::layer_norm});
        }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, ShardedModel, ::testing::ValuesIn(full_matrix()), case_name);

// Packed documents (docs/model.md "Packed sequences") of 5, 11 and 8 tokens in
// a sequence of 32, none a multiple of 2 x cp: each rank's tokens equal the
// single rank's (which pads none), wherever its layout put them.
class ShardedPackedModel : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedPackedModel, EqualsTheSingleRankRunInFp64) {
  const Case k = GetParam();
  for (PositionEmbeddingKind position :
       {PositionEmbeddingKind::learned, PositionEmbeddingKind::rope}) {
    SCOPED_TRACE(position == PositionEmbeddingKind::rope ? "rope" : "learned");
    ModelConfig c = parallel_config(k.sp, k.act, k.norm);
    c.micro_batch = 1;
    c.seq = 32;
    c.packed_seq_lengths = {5, 11, 8};
    c.position_embedding = position;
    expect_sharded_run_equals_single_rank_run(c, k.tp, k.cp, k.dp);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, ShardedPackedModel,
    ::testing::Values(Case{1, 2, 1, false, ActivationKind::gelu, NormKind::layer_norm},
                      Case{2, 2, 1, true, ActivationKind::swiglu, NormKind::rms_norm},
                      Case{2, 1, 2, true, ActivationKind::gelu, NormKind::layer_norm},
                      Case{1, 4, 1, false, ActivationKind::swiglu, NormKind::layer_norm}),
    case_name);

// Grouped-query attention (docs/model.md "Grouped-query attention"), 8 heads:
// groups split over TP (groups >= tp), or fewer groups than TP ranks (the
// ranks all-gather the projection and keep their group, as Megatron does);
// the CP gather moves the key/value heads alone. Rotary positions; on some
// cases selective core_attn recompute (the repeat of the key/value heads inside
// the recomputed region), a head dimension of 6 (kv_channels, not hidden /
// heads = 4) and q/k norms (their gradients summed over TP).
struct GqaCase {
  int tp, cp, dp;
  bool sp;
  std::int64_t groups;
  bool recompute = false;
  std::int64_t kv_channels = 0;
  bool qk_layernorm = false;
};
std::string gqa_case_name(const ::testing::TestParamInfo<GqaCase>& info) {
  const GqaCase& g = info.param;
  return "tp" + std::to_string(g.tp) + "_cp" + std::to_string(g.cp) + "_dp" + std::to_string(g.dp) +
         (g.sp ? "_sp" : "") + "_groups" + std::to_string(g.groups) +
         (g.recompute ? "_core_attn_recompute" : "") +
         (g.kv_channels > 0 ? "_kv" + std::to_string(g.kv_channels) : "") +
         (g.qk_layernorm ? "_qknorm" : "");
}
void PrintTo(const GqaCase& g, std::ostream* os) { *os << gqa_case_name({g, 0}); }
class ShardedGqaModel : public ::testing::TestWithParam<GqaCase> {};

TEST_P(ShardedGqaModel, EqualsTheSingleRankRunInFp64) {
  const GqaCase k = GetParam();
  ModelConfig c = parallel_config(k.sp, ActivationKind::swiglu, NormKind::rms_norm);
  c.hidden = 32;
  c.heads = 8;
  c.seq = 16;  // 2 * cp * tp chunks under CP 2, SP 4
  c.num_query_groups = k.groups;
  c.kv_channels = k.kv_channels;
  c.qk_layernorm = k.qk_layernorm;
  c.position_embedding = PositionEmbeddingKind::rope;
  if (k.recompute) {
    c.recompute = RecomputeKind::selective;
    c.recompute_modules.core_attn = true;
  }
  expect_sharded_run_equals_single_rank_run(c, k.tp, k.cp, k.dp);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardedGqaModel,
                         ::testing::Values(GqaCase{2, 2, 1, true, 2, false, 0, true},
                                           GqaCase{2, 1, 2, false, 4, false, 6},
                                           GqaCase{1, 2, 2, false, 2, true},
                                           GqaCase{4, 1, 1, true, 2, true, 6, true},
                                           GqaCase{4, 2, 1, true, 1, false, 0, true},
                                           GqaCase{2, 2, 1, false, 1, true, 6}),
                         gqa_case_name);

// MoE layers (docs/model.md "MoE layer"): the loss and every gradient of a
// sharded run with expert parallelism equal the single rank's, the aux loss
// and capacity included. Each EP rank holds only its experts (under their
// global names), whose gradients are summed over the ranks holding them.
struct MoeCase {
  int tp, cp, dp, ep;
  // Forced routing toward experts 0 and 1: EP rank 1 receives no token at all
  // and must still take part in every all-to-all, backward included.
  bool starve_ep_rank_1 = false;
  // The experts' own TP size (--etp; 0 = tp): the expert layout etp x ep x edp
  // over the ranks of the stage, as Megatron's expert rank generator lays it.
  int etp = 0;
};
class ShardedMoeModel : public ::testing::TestWithParam<MoeCase> {};

TEST_P(ShardedMoeModel, LossAndGradientsEqualTheSingleRankRunInFp64) {
  const MoeCase k = GetParam();
  at::set_num_threads(1);
  constexpr std::int64_t kMicrobatches = 2;
  ModelConfig c = parallel_config(k.tp > 1, ActivationKind::swiglu, NormKind::rms_norm);
  c.moe.experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden = 8 * std::max(k.tp, k.etp);
  c.moe.expert_tp = k.etp;
  c.moe.aux_loss_coef = 0.1;
  c.moe.capacity_factor = 1.0;
  c.moe.shared_expert_ffn = 8 * k.tp;
  if (k.starve_ep_rank_1) c.moe.force_routing = ForcedRouting::biased;
  ModelConfig single_cfg = c;
  single_cfg.sequence_parallel = false;
  const RankResult single = run_model(single_cfg, ParallelContext::single(), k.dp * kMicrobatches);
  const auto sharded = testing::run_model_ranks(
      ParallelTopology(k.tp, k.cp, k.dp, k.ep, 1, k.etp),
      [&](ParallelContext par) { return run_model(c, par, kMicrobatches); });
  ASSERT_EQ(sharded.report(), "");
  for (std::size_t rank = 0; rank < sharded.results.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const RankResult& r = sharded.results[rank];
    EXPECT_NEAR(r.loss, single.loss, 1e-10 * std::abs(single.loss));
    std::size_t experts = 0;
    for (const auto& [name, g] : r.grads) {
      ASSERT_TRUE(single.grads.count(name)) << name << " is not a single-rank parameter";
      EXPECT_LT(rel_err(g, single.grads.at(name)), 1e-10) << name;
      experts += name.find(".experts.local_experts.") != std::string::npos ? 1 : 0;
    }
    // 2 layers x (4 / ep) local experts x (fc1, fc2).
    EXPECT_EQ(experts, static_cast<std::size_t>(2 * (4 / k.ep) * 2));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ShardedMoeModel,
    ::testing::Values(MoeCase{1, 1, 2, 2}, MoeCase{2, 1, 2, 2}, MoeCase{1, 2, 2, 4},
                      MoeCase{2, 2, 1, 2}, MoeCase{1, 1, 2, 2, true},
                      // Expert TP below tp (TP peers in one EP group),
                      // above tp (DP ranks' tokens gathered), with CP.
                      MoeCase{2, 1, 2, 2, false, 1}, MoeCase{2, 1, 1, 2, false, 1},
                      MoeCase{1, 1, 4, 2, false, 2}, MoeCase{2, 2, 1, 1, false, 4},
                      MoeCase{4, 1, 1, 2, false, 2}),
    [](const ::testing::TestParamInfo<MoeCase>& info) {
      const MoeCase& m = info.param;
      return "tp" + std::to_string(m.tp) + "_cp" + std::to_string(m.cp) + "_dp" +
             std::to_string(m.dp) + "_ep" + std::to_string(m.ep) +
             (m.etp > 0 ? "_etp" + std::to_string(m.etp) : "") +
             (m.starve_ep_rank_1 ? "_starved" : "");
    });

}  // namespace
}  // namespace parity
