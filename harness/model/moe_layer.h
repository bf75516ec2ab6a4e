#pragma once
// Megatron's MoE block (MoELayer: TopKRouter, token dispatcher, experts,
// optional shared expert), written once against the Backend interface. It
// replaces a TransformerLayer's dense MLP on the layers MoeConfig::layers
// selects. See docs/model.md "MoE layer".
//
// Layout: the router runs on this rank's tokens ([s/tp, b, h] under SP, the
// residual stream's shard). The dispatcher gathers the tokens of the expert TP
// group (the TP group's SP shards unless --etp gives the experts a TP size of
// their own), sends each token to the expert-parallel rank that holds its
// experts (an uneven all-to-all over EP), runs the local experts (their weights
// split over the expert TP group like a dense MLP: fc1 by rows, fc2 by
// columns), sends the results back, combines them weighted by the routing
// probabilities and reduce-scatters the partial sums back to this rank's tokens.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/model/gpt_model.h"

namespace parity {

// One routing decision of a microbatch, over this rank's T = s_local * b tokens
// (row t = position-major, batch-minor: t = s * b + b_index).
struct Routing {
  at::Tensor probs;        // [T, E] combine weights, 0 where not dispatched (grad flows)
  at::Tensor routing_map;  // [T, E] bool: dispatched (after bias, forcing, capacity)
  // Scalar, this rank's share of the microbatch's auxiliary losses (the
  // load-balancing loss plus the z-loss); undefined with neither.
  at::Tensor aux_loss;
};

// Megatron's TopKRouter: gating linear (weight [E, h], replicated over TP),
// score function, top-k with the aux-loss-free expert bias, capacity dropping,
// the switch load-balancing loss, and the three router observation sites.
class TopKRouter : public Module {
 public:
  TopKRouter(std::string name, const ModelConfig* config, ParameterFactory& params,
             std::int64_t layer_index);
  // x [s_local, b, h]; positions [s_local] the GLOBAL positions of x's rows.
  Routing forward(const ModelRuntime& rt, const at::Tensor& x, const at::Tensor& positions) const;
  // After a training step: the aux-loss-free bias moves toward balance,
  // bias += rate * sign(mean load - load), loads summed over every rank's
  // valid tokens of the step (collectives over tp, cp and dp). A no-op without
  // --moe-expert-bias.
  void update_expert_bias(const ModelRuntime& rt);
  const at::Tensor& expert_bias() const { return expert_bias_; }
  // The valid dispatched tokens per expert counted in this step: the expert
  // load of the step's forwards, once per microbatch (see forward).
  const at::Tensor& step_tokens_per_expert() const { return tokens_per_expert_; }
  // Megatron's MoE loss tracker for this layer: [2] fp64, this rank's shares of
  // the step's load-balancing loss and z-loss, summed over its microbatches,
  // recorded once per microbatch (never by a recomputation).
  const at::Tensor& step_tracked_losses() const { return tracked_losses_; }
  // Before each training step: zeroes the step's counters in place (their
  // storage is what captured graphs write; warmup and capture ran since the
  // last step and left their counts there).
  void begin_step();
  // The router's persistent state that a forward writes in place (the expert
  // bias, the step's counters): a captured iteration's static state.
  std::vector<at::Tensor> persistent_buffers() const;

 private:
  void observe_sites(const at::Tensor& logits, const at::Tensor& valid) const;
  void observe_diagnostics(const ModelRuntime& rt, const at::Tensor& routed, const at::Tensor& map,
                           const at::Tensor& valid, std::int64_t s, std::int64_t b) const;
  // b: sequences in the microbatch (the groups of the sequence-level variant).
  at::Tensor aux_loss(const ModelRuntime& rt, const at::Tensor& routed, const at::Tensor& weight,
                      std::int64_t b) const;
  at::Tensor z_loss(const ModelRuntime& rt, const at::Tensor& logits,
                    const at::Tensor& weight) const;
  void track_losses(const at::Tensor& aux, const at::Tensor& z) const;
  at::Tensor capacity_keep(const ModelRuntime& rt, const at::Tensor& probs, const at::Tensor& map,
                           const at::Tensor& positions, std::int64_t b) const;

  at::Tensor weight_;
  std::int64_t layer_index_;
  at::Tensor expert_bias_;                // [E] fp32 (all zeros without --moe-expert-bias)
  mutable at::Tensor tokens_per_expert_;  // [E] fp64 valid dispatched tokens of the step
  mutable at::Tensor tracked_losses_;     // [2] fp64 (step_tracked_losses)
  mutable at::Tensor forced_logits_;      // --moe-force-routing random: [seq, b, E], made once
};

// One microbatch's routed tokens between the MoE stages (LayerStage, graph_scope.h):
// the tokens (the pre-MLP norm's output), their combine weights and dispatch map,
// this rank's [s_local, b, .] or, after preprocess(), the TP group's [s, b, .].
struct RoutedTokens {
  at::Tensor tokens, probs, map;
  at::Tensor aux_loss;  // undefined without --moe-aux-loss
  bool gathered = false;
};

// The routed experts this rank holds (ep_rank * E/ep + local), each a dense
// MLP split over TP, without biases (Megatron's grouped experts).
class MoELayer : public Module {
 public:
  MoELayer(const std::string& name, const ModelConfig* config, ParameterFactory& params,
           std::int64_t layer_index, int ep_rank, int ep_size);
  // x [s_local, b, h] -> (output [s_local, b, h], undefined bias). The aux
  // loss rides on the output (attach_aux_loss).
  // route -> preprocess -> experts -> postprocess, checkpointed as one under the
  // selective recompute module moe.
  std::pair<at::Tensor, at::Tensor> forward(const ModelRuntime& rt, const at::Tensor& x,
                                            const at::Tensor& positions) const;

  // The stages, for partial graphs (graph_scope moe_router: route and preprocess
  // in the router graph, experts eager, postprocess in the post-process graph).
  // Router: x [s_local, b, h], positions the GLOBAL positions of the CP rank's rows.
  RoutedTokens route(const ModelRuntime& rt, const at::Tensor& x,
                     const at::Tensor& positions) const;
  // The dispatcher's preprocess: the TP group's tokens, weights and map (the SP
  // all-gather; its backward reduce-scatters, summing each TP rank's partial
  // combine gradients). Without SP x TP > 1 only marks them gathered.
  void preprocess(const ModelRuntime& rt, RoutedTokens& r) const;
  // Dispatch (over EP), the experts, the weighted combine and the reduce-scatter
  // of the experts' TP partial sums back to the sequence shard: [s_local, b, h].
  // Preprocesses first when `r` is not gathered yet.
  at::Tensor experts(const ModelRuntime& rt, RoutedTokens r) const;
  // The shared expert on x (the pre-MLP norm's output) added to the experts'
  // output, the aux loss attached (attach_aux_loss).
  at::Tensor postprocess(const ModelRuntime& rt, const at::Tensor& routed_out, const at::Tensor& x,
                         const at::Tensor& aux_loss) const;
  TopKRouter& router() { return router_; }
  const TopKRouter& router() const { return router_; }

 private:
  struct Expert {
    at::Tensor fc1, fc2;  // [fc1_width / tp, h], [h, ffn / tp]
  };
  TopKRouter router_;
  std::vector<Expert> experts_;  // local experts, in global order
  std::int64_t first_expert_;    // global index of experts_[0]
  std::unique_ptr<ColumnParallelLinear> shared_fc1_;
  std::unique_ptr<RowParallelLinear> shared_fc2_;

  at::Tensor run_expert(const ModelRuntime& rt, const Expert& e, const at::Tensor& rows) const;
  // Tokens [N, h] of the TP group with their combine weights and map [N, E]:
  // the experts' weighted outputs [N, h] (TP partial sums).
  at::Tensor dispatch_and_combine(const ModelRuntime& rt, const at::Tensor& tokens,
                                  const at::Tensor& probs, const at::Tensor& map) const;
  at::Tensor dispatch_over_ep(const ModelRuntime& rt, const at::Tensor& tokens,
                              const at::Tensor& probs, const at::Tensor& map) const;
};

}  // namespace parity
