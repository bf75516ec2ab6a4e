#include "harness/model/moe_layer.h"

#include <ATen/ATen.h>

#include <cmath>

#include "harness/backend/aux_loss_scaler.h"
#include "harness/backend/ep_mappings.h"
#include "harness/backend/tp_mappings.h"
#include "harness/faults/code_path_faults.h"
#include "harness/model/router_diagnostics.h"
#include "harness/observation/execution_point.h"
#include "harness/recompute/checkpoint.h"

PARITY_USES_FAULT(aux_loss_tracked_on_recompute);
PARITY_USES_FAULT(aux_loss_tracker_host_side);
PARITY_USES_FAULT(diagnostics_under_cp);
PARITY_USES_FAULT(expert_index_local);
PARITY_USES_FAULT(expert_load_count_ungated);
PARITY_USES_FAULT(expert_skip_empty_rank);
PARITY_USES_FAULT(observe_forced_logits);
PARITY_USES_FAULT(padding_included);
PARITY_USES_FAULT(router_stats_include_padding);

namespace parity {

namespace {

// Routing runs in fp32 (fp64 for an fp64 model): Megatron's moe_router_dtype.
at::ScalarType routing_dtype(const at::Tensor& logits) {
  return logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The score function, per token over the experts (unnormalized for sigmoid
// and sqrt-softplus, as Megatron's topk_routing_with_score_function).
at::Tensor score_of(RouterScore score, const at::Tensor& logits) {
  switch (score) {
    case RouterScore::softmax:
      return at::softmax(logits, -1);
    case RouterScore::sigmoid:
      return at::sigmoid(logits);
    case RouterScore::sqrt_softplus:
      return at::sqrt(at::softplus(logits));
  }
  return at::softmax(logits, -1);
}

// The normalized decision distribution per token (router_scores; the aux
// loss's probabilities): every score function divided by its sum.
at::Tensor decision_distribution(RouterScore score, const at::Tensor& logits) {
  const at::Tensor s = score_of(score, logits);
  return score == RouterScore::softmax ? s : s / s.sum(-1, /*keepdim=*/true);
}

at::Tensor gather_rows(Communicator* c, const at::Tensor& t) {
  return c && c->size() > 1 ? c->all_gather(t.contiguous(), 0) : t;
}

}  // namespace

// ---------------------------------------------------------------- router
TopKRouter::TopKRouter(std::string name, const ModelConfig* config, ParameterFactory& params,
                       std::int64_t layer_index)
    : Module(std::move(name), config), layer_index_(layer_index) {
  const MoeConfig& m = config->moe;
  // Replicated over TP; under SP each TP rank routes its own tokens, so the
  // gradient is partial per TP rank (finalize_grads all-reduces it).
  weight_ = params.make(name_ + ".weight", {m.experts, config->hidden}, InitKind::normal,
                        config->init_std, ShardSpec::replicate(), config->sequence_parallel);
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(weight_.device());
  expert_bias_ = at::zeros({m.experts}, f32);
  tokens_per_expert_ = at::zeros({m.experts}, f32.dtype(at::kDouble));
  tracked_losses_ = at::zeros({2}, f32.dtype(at::kDouble));
}

void TopKRouter::begin_step() {
  tokens_per_expert_.zero_();
  tracked_losses_.zero_();
}

std::vector<at::Tensor> TopKRouter::persistent_buffers() const {
  return {expert_bias_, tokens_per_expert_, tracked_losses_};
}

Routing TopKRouter::forward(const ModelRuntime& rt, const at::Tensor& x,
                            const at::Tensor& positions) const {
  const ModelConfig& c = *config_;
  const MoeConfig& m = c.moe;
  const std::int64_t E = m.experts, k = m.topk, s = x.size(0), b = x.size(1), T = s * b;
  const at::Tensor logits = rt.backend->linear(x, weight_, at::Tensor());  // [s, b, E]
  const at::ScalarType dtype = routing_dtype(logits);

  // Valid (non-padding) tokens, [T] bool; undefined without a padding mask.
  at::Tensor valid;
  const std::int64_t padding = m.padding_tokens(c.seq);
  if (padding > 0) valid = (positions < c.seq - padding).unsqueeze(1).expand({s, b}).reshape({T});
  // Packed sequences: the documents' padding is the router's padding mask.
  if (rt.packing) valid = rt.packing->valid_of(positions).unsqueeze(1).expand({s, b}).reshape({T});

  // What routing sees: the logits, or the forced ones (tests only).
  at::Tensor routed = logits.to(dtype).reshape({T, E});
  if (m.force_routing == ForcedRouting::random) {
    // Megatron's apply_random_logits replaces the logits; parity's are drawn
    // once per (seed, router) for every global position, so every layout
    // routes each token alike.
    if (!forced_logits_.defined())
      forced_logits_ = full_parameter(c.seed, name_ + ".forced_logits", {c.seq, c.micro_batch, E},
                                      InitKind::normal, 1.0, dtype)
                           .to(x.device());
    // Packed sequences: by the token's layout-free order (padding wraps around).
    const at::Tensor rows =
        rt.packing ? rt.packing->token_order.index_select(0, positions).remainder(c.seq)
                   : positions;
    routed = forced_logits_.index_select(0, rows).narrow(1, 0, b).reshape({T, E});
  } else if (m.force_routing == ForcedRouting::biased) {
    // Every token prefers the first k experts (starving the others' EP ranks).
    at::Tensor bias = at::zeros({E}, routed.options());
    bias.narrow(0, 0, k).fill_(100.0);
    routed = routed + bias;
  }
  observe_sites(fault_active(fault_observe_forced_logits)
                    ? routed.reshape({s, b, E}).to(logits.scalar_type())
                    : logits,
                valid);

  const at::Tensor scores = score_of(m.score, routed);  // [T, E]
  at::Tensor selection = scores.detach();
  if (m.expert_bias_rate > 0) selection = selection + expert_bias_.to(selection.dtype());
  const at::Tensor chosen = std::get<1>(at::topk(selection, k, -1));  // [T, k]
  at::Tensor gathered = scores.gather(1, chosen);
  // Megatron normalizes the top-k of sigmoid-like scores; softmax keeps them.
  if (m.score != RouterScore::softmax) gathered = gathered / gathered.sum(-1, true);
  at::Tensor map = at::zeros({T, E}, scores.options().dtype(at::kBool)).scatter_(1, chosen, true);
  at::Tensor probs = at::zeros_like(scores).scatter(1, chosen, gathered);
  if (m.capacity_factor > 0) {
    const at::Tensor keep = capacity_keep(rt, probs.detach(), map, positions, b);
    map = map.logical_and(keep);
    probs = probs * keep.to(probs.scalar_type());
  }

  Routing r;
  r.probs = probs;
  r.routing_map = map;
  // The valid tokens' weights for every router statistic: the aux loss, the
  // z-loss and the expert load. Fault router-stats-include-padding
  // (NVIDIA/Megatron-LM #1984): every token counts.
  const at::Tensor weight = valid.defined() && !fault_active(fault_router_stats_include_padding)
                                ? valid.to(dtype)
                                : at::ones({T}, scores.options());
  if (rt.training && is_observing_tensor(SourceKind::router_diagnostics))
    observe_diagnostics(rt, routed, map, valid, s, b);
  if (rt.training) {
    at::Tensor aux, z;
    if (m.aux_loss_coef > 0) aux = aux_loss(rt, routed, weight, b);
    // On the router's own logits: forcing replaces what routing sees only.
    if (m.z_loss_coef > 0) z = z_loss(rt, logits.to(dtype).reshape({T, E}), weight);
    track_losses(aux, z);
    r.aux_loss = aux.defined() && z.defined() ? aux + z : (aux.defined() ? aux : z);
  }
  // The step's expert load (the expert bias's counts, the logged expert load):
  // valid dispatched tokens, training steps only, counted by the forward
  // execution and never by a recomputation, so once per microbatch under
  // every recompute kind and graph mode (a captured count replays with the
  // forward; the counts of graph warmups and captures, which run between
  // steps, are zeroed by begin_step). Fault expert-load-count-ungated
  // (NVIDIA-NeMo/Automodel PR 3247): a recomputation counts again.
  if ((m.expert_bias_rate > 0 || m.per_layer_logging) && rt.training &&
      (!in_recomputation() || fault_active(fault_expert_load_count_ungated))) {
    at::NoGradGuard no_grad;
    tokens_per_expert_ += (map.to(at::kDouble) * weight.to(at::kDouble).unsqueeze(1)).sum(0);
  }
  return r;
}

// Megatron's MoE loss tracker (save_to_aux_losses_tracker): this rank's shares
// of the microbatch's losses, added on the device into the persistent buffer
// (a captured graph replays the add), by the forward execution only.
void TopKRouter::track_losses(const at::Tensor& aux, const at::Tensor& z) const {
  if (!config_->moe.per_layer_logging || (!aux.defined() && !z.defined())) return;
  // Fault aux-loss-tracked-on-recompute (NVIDIA/Megatron-LM #1330, #1478): the
  // recomputation of a checkpointed router records its losses again.
  if (in_recomputation() && !fault_active(fault_aux_loss_tracked_on_recompute)) return;
  // Fault aux-loss-tracker-host-side (NVIDIA/Megatron-LM PR 7518): the
  // accumulation is host code, which a graph replay does not run.
  if (fault_active(fault_aux_loss_tracker_host_side) &&
      current_execution_point().phase == GraphPhase::replay)
    return;
  at::NoGradGuard no_grad;
  const at::Tensor zero = at::zeros({}, tracked_losses_.options());
  tracked_losses_ += at::stack({aux.defined() ? aux.detach().to(at::kDouble) : zero,
                                z.defined() ? z.detach().to(at::kDouble) : zero});
}

// Megatron's router z-loss (ST-MoE): coef * mean over the microbatch's valid
// tokens of logsumexp(logits)^2, this rank's share (its tokens' sum over the
// valid tokens of the whole microbatch, counted over the ranks that split the
// sequence), so the shares add up as the aux loss's do.
at::Tensor TopKRouter::z_loss(const ModelRuntime& rt, const at::Tensor& logits,
                              const at::Tensor& weight) const {
  at::Tensor n;
  {
    at::NoGradGuard no_grad;
    n = weight.sum().reshape({1});
    if (config_->sequence_parallel) n = sum_over(rt.parallel.tp, n);
    n = sum_over(rt.parallel.cp, n);
  }
  const at::Tensor lse = at::logsumexp(logits, -1);  // [T]
  return (lse * lse * weight).sum() / n.clamp_min(1.0).squeeze(0) * config_->moe.z_loss_coef;
}

// Router observations: the raw logits (never the forced ones) and the
// normalized decision distribution, both without grad; under a padding mask
// compacted to the valid tokens [valid, E] (both populations on dim 0).
void TopKRouter::observe_sites(const at::Tensor& logits, const at::Tensor& valid) const {
  const bool want_logits = is_observing_tensor(SourceKind::router_logits);
  const bool want_scores = is_observing_tensor(SourceKind::router_scores);
  if (!want_logits && !want_scores) return;
  at::NoGradGuard no_grad;
  at::Tensor observed = logits.detach();
  const OptionalDim tp_dim = config_->sequence_parallel ? OptionalDim(0) : std::nullopt;
  OptionalDim batch_dim = 1;
  // Fault padding-included: the padding rows stay in what is observed.
  if (valid.defined() && !fault_active(fault_padding_included)) {
    observed =
        observed.reshape({-1, observed.size(-1)}).index_select(0, valid.nonzero().squeeze(1));
    batch_dim = 0;
  }
  if (want_logits)
    observe_tensor(*this, "router_logits", SourceKind::router_logits, observed, tp_dim, 0,
                   batch_dim);
  if (want_scores)
    observe_tensor(*this, "router_scores", SourceKind::router_scores,
                   decision_distribution(config_->moe.score, observed.to(routing_dtype(observed))),
                   tp_dim, 0, batch_dim);
}

// Megatron's router diagnostics (megatron-reference 3.7): after dropping,
// training only, [b, 7, E] per local sequence. They normalize within a whole
// sequence, so the router declines when SP x TP or CP splits the sequences
// (Megatron raises; parity's validation rejects the metrics before a run).
void TopKRouter::observe_diagnostics(const ModelRuntime& rt, const at::Tensor& routed,
                                     const at::Tensor& map, const at::Tensor& valid, std::int64_t s,
                                     std::int64_t b) const {
  const bool split =
      (config_->sequence_parallel && rt.parallel.tp_size() > 1) || rt.parallel.cp_size() > 1;
  // Fault diagnostics-under-cp: split sequences are summarized per rank.
  if (split && !fault_active(fault_diagnostics_under_cp)) return;
  at::NoGradGuard no_grad;
  const MoeConfig& m = config_->moe;
  const at::Tensor scores = decision_distribution(m.score, routed.detach());
  const at::Tensor chosen = std::get<1>(at::topk(scores, m.topk, -1));
  const at::Tensor aux_map = at::zeros_like(map).scatter_(1, chosen, true);
  const at::Tensor diagnostics = build_router_diagnostics(
      scores, aux_map, map, m.expert_bias_rate > 0 ? expert_bias_ : at::Tensor(), s, b,
      valid.defined() ? valid.logical_not() : at::Tensor());
  observe_tensor(*this, "router_diagnostics", SourceKind::router_diagnostics, diagnostics,
                 std::nullopt, std::nullopt, 0);
}

// Megatron's switch load-balancing loss over the valid tokens of the
// microbatch's whole sequence: E * coef / (k * N^2) * sum_e P_e * f_e with P_e
// the summed decision probabilities (this rank's tokens, differentiable) and
// f_e the unbiased top-k counts, N the valid tokens (both summed over the
// ranks that split the sequence: tp under SP, cp). The ranks' shares add up to
// the whole sequence's loss. Sequence-level (Megatron's seq_aux_loss): the
// same per sequence (P, f and N of its own tokens), averaged over the b
// sequences; tokens are position-major ([s, b] flattened), so a token's
// sequence is its index mod b.
at::Tensor TopKRouter::aux_loss(const ModelRuntime& rt, const at::Tensor& routed,
                                const at::Tensor& weight, std::int64_t b) const {
  const MoeConfig& m = config_->moe;
  const std::int64_t E = m.experts;
  const std::int64_t groups = m.seq_aux_loss ? b : 1;
  const at::Tensor distribution = decision_distribution(m.score, routed);  // [T, E]
  const std::int64_t T = distribution.size(0);
  at::Tensor counts;
  {
    at::NoGradGuard no_grad;
    const at::Tensor chosen = std::get<1>(at::topk(distribution.detach(), m.topk, -1));
    const at::Tensor aux_map =
        at::zeros_like(distribution).scatter_(1, chosen, 1.0) * weight.unsqueeze(1);
    counts = at::cat({aux_map.reshape({T / groups, groups, E}).sum(0),
                      weight.reshape({T / groups, groups, 1}).sum(0)},
                     1);  // [groups, E + 1]
    if (config_->sequence_parallel) counts = sum_over(rt.parallel.tp, counts);
    counts = sum_over(rt.parallel.cp, counts);
  }
  const at::Tensor per_expert = counts.narrow(1, 0, E);
  const at::Tensor n = counts.narrow(1, E, 1).squeeze(1);
  // No host read (a captured graph may hold the layer): no valid token means
  // zero counts, so the clamp only avoids 0/0.
  const at::Tensor p = (distribution * weight.unsqueeze(1)).reshape({T / groups, groups, E}).sum(0);
  return ((p * per_expert).sum(1) / (n * n).clamp_min(1.0)).sum() *
         (static_cast<double>(E) * m.aux_loss_coef / static_cast<double>(m.topk)) /
         static_cast<double>(groups);
}

// Capacity (Megatron's drop policy "probs"): each expert keeps its
// ceil(k * N / E * factor) highest-probability tokens of the microbatch
// (N = seq * b), ties broken by the token's global id (position * b + batch
// index). Decided over the whole sequence (gathered over tp under SP and cp),
// not per rank as Megatron does, so every layout drops the same tokens.
at::Tensor TopKRouter::capacity_keep(const ModelRuntime& rt, const at::Tensor& probs,
                                     const at::Tensor& map, const at::Tensor& positions,
                                     std::int64_t b) const {
  at::NoGradGuard no_grad;
  const MoeConfig& m = config_->moe;
  const std::int64_t T = probs.size(0), E = m.experts;
  const std::int64_t capacity = static_cast<std::int64_t>(
      std::ceil(static_cast<double>(m.topk * config_->seq * b) / E * m.capacity_factor));
  // Packed sequences: tokens in their layout-free order, padding after them all
  // and competing for no slot (the layouts pad differently).
  const at::Tensor token_order =
      rt.packing ? rt.packing->token_order.index_select(0, positions) : positions;
  const at::Tensor ids =
      (token_order.unsqueeze(1) * b + at::arange(b, positions.options())).reshape({T});
  at::Tensor routed = map;
  if (rt.packing)
    routed = map.logical_and(
        rt.packing->valid_of(positions).unsqueeze(1).expand({-1, b}).reshape({T, 1}));
  at::Tensor all_scores = at::where(routed, probs, at::full_like(probs, -1.0));
  at::Tensor all_ids = ids;
  Communicator* tp = config_->sequence_parallel ? rt.parallel.tp : nullptr;
  all_scores = gather_rows(rt.parallel.cp, gather_rows(tp, all_scores));
  all_ids = gather_rows(rt.parallel.cp, gather_rows(tp, all_ids));
  // Order by id, then (stably) by score: the rank of each token per expert.
  const at::Tensor by_id = std::get<1>(at::sort(all_ids, /*stable=*/true, 0, false));
  const at::Tensor sorted_scores = all_scores.index_select(0, by_id);
  const at::Tensor order =
      std::get<1>(at::sort(sorted_scores, /*stable=*/true, 0, /*descending=*/true));  // [N, E]
  at::Tensor rank_of = at::empty_like(order);
  rank_of.scatter_(0, order,
                   at::arange(order.size(0), order.options()).unsqueeze(1).expand_as(order));
  at::Tensor keep_sorted = rank_of < capacity;
  at::Tensor keep_all = at::empty_like(keep_sorted).index_copy_(0, by_id, keep_sorted);
  const std::int64_t offset =
      (ParallelContext::rank_of(rt.parallel.cp) * ParallelContext::size_of(tp) +
       ParallelContext::rank_of(tp)) *
      T;
  return keep_all.narrow(0, offset, T).logical_and(map);
}

void TopKRouter::update_expert_bias(const ModelRuntime& rt) {
  const MoeConfig& m = config_->moe;
  if (m.expert_bias_rate <= 0) return;
  at::NoGradGuard no_grad;
  at::Tensor counts = tokens_per_expert_;
  if (config_->sequence_parallel) counts = sum_over(rt.parallel.tp, counts);
  counts = sum_over(rt.parallel.dp, sum_over(rt.parallel.cp, counts));
  const at::Tensor step = at::sign(counts.mean() - counts) * m.expert_bias_rate;
  expert_bias_.add_(step.to(expert_bias_.scalar_type()));
  tokens_per_expert_.zero_();
}

// ---------------------------------------------------------------- experts
MoELayer::MoELayer(const std::string& name, const ModelConfig* config, ParameterFactory& params,
                   std::int64_t layer_index, int ep_rank, int ep_size)
    : Module(name, config), router_(name + ".router", config, params, layer_index) {
  const ModelConfig& c = *config;
  const std::int64_t local = c.moe.experts / ep_size;
  first_expert_ = ep_rank * local;
  const bool swiglu = c.activation == ActivationKind::swiglu;
  const std::int64_t ffn = c.expert_ffn_hidden();
  const double out_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (std::int64_t l = 0; l < local; ++l) {
    const std::int64_t global = first_expert_ + l;
    // Canonical names carry the GLOBAL expert index (contract.md section 2).
    // Fault expert-index-local: the EP rank's local index instead.
    const std::int64_t named = fault_active(fault_expert_index_local) ? l : global;
    const std::string base = name_ + ".experts.local_experts." + std::to_string(named);
    Expert e;
    // Split over the expert TP group (Megatron's expert_tensor_parallel group).
    e.fc1 = params.make_expert(base + ".linear_fc1.weight", {swiglu ? 2 * ffn : ffn, c.hidden},
                               InitKind::normal, c.init_std, ShardSpec::along(0, swiglu ? 2 : 1),
                               global);
    e.fc2 = params.make_expert(base + ".linear_fc2.weight", {c.hidden, ffn}, InitKind::normal,
                               out_std, ShardSpec::along(1), global);
    experts_.push_back(e);
  }
  // The other EP ranks' experts: in an unsharded weights file, not here.
  for (std::int64_t g = 0; g < c.moe.experts; ++g) {
    if (g >= first_expert_ && g < first_expert_ + local) continue;
    const std::string base = name_ + ".experts.local_experts." + std::to_string(g);
    params.held_elsewhere(base + ".linear_fc1.weight");
    params.held_elsewhere(base + ".linear_fc2.weight");
  }
  if (c.moe.shared_expert_ffn > 0) {
    const std::int64_t f = c.moe.shared_expert_ffn;
    shared_fc1_ = std::make_unique<ColumnParallelLinear>(
        name_ + ".shared_experts.linear_fc1", config, params, c.hidden, swiglu ? 2 * f : f,
        /*bias=*/false, /*gather_output=*/false, c.init_std, swiglu ? 2 : 1);
    shared_fc2_ = std::make_unique<RowParallelLinear>(name_ + ".shared_experts.linear_fc2", config,
                                                      params, f, c.hidden, /*bias=*/false, out_std);
  }
}

at::Tensor MoELayer::run_expert(const ModelRuntime& rt, const Expert& e,
                                const at::Tensor& rows) const {
  at::Tensor h = rt.backend->linear(rows, e.fc1, at::Tensor());
  h = config_->activation == ActivationKind::swiglu ? rt.backend->swiglu(h) : rt.backend->gelu(h);
  return rt.backend->linear(h, e.fc2, at::Tensor());
}

at::Tensor MoELayer::dispatch_and_combine(const ModelRuntime& rt, const at::Tensor& tokens,
                                          const at::Tensor& probs, const at::Tensor& map) const {
  if (rt.parallel.ep_size() > 1) return dispatch_over_ep(rt, tokens, probs, map);
  at::Tensor out = at::zeros_like(tokens);
  for (std::size_t l = 0; l < experts_.size(); ++l) {
    const std::int64_t g = first_expert_ + static_cast<std::int64_t>(l);
    const at::Tensor rows = map.select(1, g).nonzero().squeeze(1);
    // No collective runs inside an expert (its TP partial sums are reduced
    // after the combine), so an expert without tokens may be skipped.
    if (rows.numel() == 0) continue;
    const at::Tensor y = run_expert(rt, experts_[l], tokens.index_select(0, rows));
    const at::Tensor w = probs.select(1, g).index_select(0, rows).unsqueeze(1).to(y.scalar_type());
    out = out.index_add(0, rows, y * w);
  }
  return out;
}

// Megatron's all-to-all dispatcher: the rows of every token routed to expert g
// go to the EP rank holding g (grouped by destination, then expert, then
// token), the local experts run on what arrives, the results go back the same
// way and are combined here. Every EP rank issues the same collectives (the
// per-expert counts all-gathered, then the two all-to-alls, each exchanging
// its sizes first) whatever it routed, also when it routed nothing.
at::Tensor MoELayer::dispatch_over_ep(const ModelRuntime& rt, const at::Tensor& tokens,
                                      const at::Tensor& probs, const at::Tensor& map) const {
  Communicator* ep = rt.parallel.ep;
  const std::int64_t E = config_->moe.experts, P = ep->size(), local = E / P;
  std::vector<at::Tensor> rows_of(static_cast<std::size_t>(E)), expert_of;
  std::vector<std::int64_t> per_expert(static_cast<std::size_t>(E)),
      send(static_cast<std::size_t>(P));
  for (std::int64_t g = 0; g < E; ++g) {
    rows_of[g] = map.select(1, g).nonzero().squeeze(1);
    per_expert[g] = rows_of[g].size(0);
    send[g / local] += per_expert[g];
    expert_of.push_back(at::full({per_expert[g]}, g, rows_of[g].options()));
  }
  const at::Tensor order = at::cat(rows_of);  // rows in send order
  const at::Tensor experts = at::cat(expert_of);
  // Who sends how many rows of which expert: the receivers' segment layout.
  const at::Tensor counts =
      ep->all_gather(at::tensor(per_expert, at::kLong).to(tokens.device()), 0).cpu();
  const std::int64_t* all = counts.data_ptr<std::int64_t>();  // [P * E], source-major
  const AllToAllResult arrived =
      all_to_all_expert_parallel(tokens.index_select(0, order), send, ep);
  // Every segment runs its expert, also an empty one: the results must stay
  // derived from what arrived, or a rank that received no token would have no
  // autograd path to either all-to-all's backward, skip them, and leave its EP
  // peers waiting (the mechanism of Megatron-LM PR 4851's hang).
  std::vector<at::Tensor> results;
  std::int64_t offset = 0;
  for (std::int64_t src = 0; src < P; ++src) {
    for (std::int64_t l = 0; l < local; ++l) {
      const std::int64_t n = all[src * E + first_expert_ + l];
      results.push_back(run_expert(rt, experts_[static_cast<std::size_t>(l)],
                                   arrived.output.narrow(0, offset, n)));
      offset += n;
    }
  }
  at::Tensor computed = at::cat(results);
  // Fault expert-skip-empty-rank (NVIDIA/Megatron-LM PR 4851): a rank that
  // received no token skips its experts and sends back a fresh empty tensor,
  // cut off from what arrived: its backward never reaches the all-to-alls.
  if (fault_active(fault_expert_skip_empty_rank) && arrived.output.size(0) == 0)
    computed = at::zeros({0, tokens.size(1)}, tokens.options().requires_grad(false));
  const at::Tensor back = all_to_all_expert_parallel(computed, arrived.recv_counts, ep).output;
  const at::Tensor w =
      probs.reshape({-1}).index_select(0, order * E + experts).unsqueeze(1).to(back.scalar_type());
  return at::zeros_like(tokens).index_add(0, order, back * w);
}

RoutedTokens MoELayer::route(const ModelRuntime& rt, const at::Tensor& x,
                             const at::Tensor& positions) const {
  Communicator* tp = config_->sequence_parallel ? rt.parallel.tp : nullptr;
  // The router sees this rank's rows: under SP its chunk of the CP-local sequence.
  const at::Tensor router_positions =
      tp ? positions.chunk(tp->size(), 0)[tp->rank()].contiguous() : positions;
  Routing r = router_.forward(rt, x, router_positions);
  const std::int64_t s = x.size(0), b = x.size(1), E = config_->moe.experts;
  RoutedTokens out;
  out.tokens = x;
  out.probs = r.probs.reshape({s, b, E});
  out.map = r.routing_map.reshape({s, b, E});
  out.aux_loss = r.aux_loss;
  return out;
}

namespace {
// The group whose tokens the experts run on together: the expert TP group
// (Megatron's dispatcher gathers over its tp group, the expert tensor parallel
// group; with ETP = TP under SP the TP group's sequence shards). Null for a
// group of one.
Communicator* expert_token_group(const ModelRuntime& rt) {
  Communicator* g = rt.parallel.expert_tp();
  return g != nullptr && g->size() > 1 ? g : nullptr;
}
}  // namespace

void MoELayer::preprocess(const ModelRuntime& rt, RoutedTokens& r) const {
  if (r.gathered) return;
  r.gathered = true;
  Communicator* tp = expert_token_group(rt);
  if (!tp) return;
  r.tokens = gather_from_sequence_parallel_region(r.tokens, tp);
  r.probs = gather_from_sequence_parallel_region(r.probs, tp);
  r.map = tp->all_gather(r.map.to(at::kInt).contiguous(), 0).to(at::kBool);
}

at::Tensor MoELayer::experts(const ModelRuntime& rt, RoutedTokens r) const {
  preprocess(rt, r);
  const std::int64_t E = config_->moe.experts, h = config_->hidden;
  at::Tensor out = dispatch_and_combine(rt, r.tokens.reshape({-1, h}), r.probs.reshape({-1, E}),
                                        r.map.reshape({-1, E}))
                       .reshape(r.tokens.sizes());
  // The experts' TP partial sums, back to this rank's tokens.
  Communicator* tp = expert_token_group(rt);
  return tp ? reduce_scatter_to_sequence_parallel_region(out, tp) : out;
}

at::Tensor MoELayer::postprocess(const ModelRuntime& rt, const at::Tensor& routed_out,
                                 const at::Tensor& x, const at::Tensor& aux_loss) const {
  at::Tensor out = routed_out;
  if (shared_fc1_) {
    at::Tensor hs = shared_fc1_->forward(rt, x);
    hs = config_->activation == ActivationKind::swiglu ? rt.backend->swiglu(hs)
                                                       : rt.backend->gelu(hs);
    out = out + shared_fc2_->forward(rt, hs).first;
  }
  return attach_aux_loss(out, aux_loss, rt.aux_loss_scale);
}

std::pair<at::Tensor, at::Tensor> MoELayer::forward(const ModelRuntime& rt, const at::Tensor& x,
                                                    const at::Tensor& positions) const {
  const MoELayer* self = this;
  CheckpointFn body = [self, rt,
                       positions](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    RoutedTokens r = self->route(rt, in[0], positions);
    const at::Tensor routed_out = self->experts(rt, r);
    return {self->postprocess(rt, routed_out, in[0], r.aux_loss)};
  };
  const ModelConfig& c = *config_;
  const bool recompute =
      rt.training && c.recompute == RecomputeKind::selective && c.recompute_modules.moe;
  at::Tensor out = recompute ? checkpoint(body, {x}, rt.rng, name_)[0] : body({x})[0];
  return {out, at::Tensor()};
}

}  // namespace parity
