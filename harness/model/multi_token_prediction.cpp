#include "harness/model/multi_token_prediction.h"

#include <ATen/ATen.h>

#include "harness/backend/aux_loss_scaler.h"
#include "harness/backend/tp_mappings.h"
#include "harness/model/gather_output.h"
#include "harness/recompute/checkpoint.h"

namespace parity {

MultiTokenPredictionLayer::MultiTokenPredictionLayer(const std::string& name,
                                                     const ModelConfig* config,
                                                     ParameterFactory& params,
                                                     const ParallelContext& parallel,
                                                     std::int64_t layer_number)
    : Module(name, config),
      layer_number_(layer_number),
      enorm_(name + ".enorm", config, params),
      hnorm_(name + ".hnorm", config, params),
      // Megatron: gather_output=False and a gather after; the same values.
      eh_proj_(name + ".eh_proj", config, params, 2 * config->hidden, config->hidden,
               /*bias=*/false, /*gather_output=*/true, config->init_std),
      // Index -1: not a decoder layer, so never an MoE layer.
      layer_(name + ".mtp_model_layer", config, params, -1, parallel),
      final_layernorm_(name + ".final_layernorm", config, params) {}

MultiTokenPredictionLayer::~MultiTokenPredictionLayer() = default;

at::Tensor MultiTokenPredictionLayer::forward(const ModelRuntime& rt, const at::Tensor& embedded,
                                              const at::Tensor& hidden,
                                              const at::Tensor& positions) const {
  auto quiet = suspend_tensor_observations();  // see the header: logits only
  const at::Tensor e = enorm_.forward(rt, embedded);
  const at::Tensor h = hnorm_.forward(rt, hidden);
  const at::ScalarType dtype = eh_proj_.weight().scalar_type();
  at::Tensor x = eh_proj_.forward(rt, at::cat({e.to(dtype), h.to(dtype)}, -1));  // [s, b, h]
  if (config_->sequence_parallel) x = scatter_to_sequence_parallel_region(x, rt.parallel.tp);
  x = layer_.forward(rt, x, positions);
  return final_layernorm_.forward(rt, x);
}

// ---------------------------------------------------------------- GPTModel's MTP members
at::Tensor GPTModel::multi_token_prediction(const at::Tensor& h, const MtpBatch& mtp,
                                            const at::Tensor& positions,
                                            std::optional<bool> runtime_gather_output) {
  const ModelRuntime* rt = &runtime_;
  const bool gathered =
      resolve_gather_output(output_layer_->gather_output(), runtime_gather_output);
  const OptionalDim tp_dim =
      logits_tp_shard_dim(output_layer_->gather_output(), runtime_gather_output);
  const bool full = config_.recompute == RecomputeKind::full_uniform ||
                    config_.recompute == RecomputeKind::full_block;
  at::Tensor hidden = h, loss;
  for (std::int64_t k = 1; k <= config_.mtp_layers; ++k) {
    const std::size_t d = static_cast<std::size_t>(k - 1);
    const MultiTokenPredictionLayer* layer = mtp_layers_[config_.mtp_repeated_layer ? 0 : d].get();
    const at::Tensor embedded = embedding_->forward(*rt, mtp.tokens[d], mtp.positions[d]);
    CheckpointFn depth = [layer, rt, positions](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{layer->forward(*rt, in[0], in[1], positions)};
    };
    hidden =
        full ? checkpoint(depth, {embedded, hidden}, rng_.get(), "mtp.depth" + std::to_string(k))[0]
             : depth({embedded, hidden})[0];
    const at::Tensor logits = output_layer_->forward(*rt, hidden, gathered);
    observe_tensor(*output_layer_, "mtp_logits." + std::to_string(k - 1), SourceKind::mtp_logits,
                   logits, tp_dim, 0, 1);
    // This rank's share of the depth's mean loss over the microbatch's valid positions.
    const at::Tensor share =
        (token_losses(logits, mtp.labels[d]) * mtp.loss_masks[d]).sum() / mtp.valid_tokens[d];
    loss = loss.defined() ? loss + share : share;
    // Megatron's MTP loss tracker, added on the device. The loss is computed
    // outside every checkpoint, so no recomputation can record it twice.
    mtp_tracked_losses_.narrow(0, static_cast<std::int64_t>(d), 1)
        .add_(share.detach().to(at::kDouble).reshape({1}));
  }
  // Megatron: mtp_loss_scaling_factor / mtp_num_layers per depth, the gradient
  // scaled as the main loss's (MTPLossAutoScaler).
  loss = loss * (config_.mtp_loss_scale / double(config_.mtp_layers));
  return attach_aux_loss(h, loss, runtime_.aux_loss_scale);
}

MtpBatch GPTModel::mtp_batch(const at::Tensor& tokens, const at::Tensor& labels) const {
  MtpBatch b;
  const std::int64_t seq = tokens.size(0);
  const at::Tensor positions = at::arange(seq, at::kLong);
  for (std::int64_t k = 1; k <= config_.mtp_layers; ++k) {
    // roll_tensor(shifts=-1) k times: row i holds row i+k, the last k rows zeros.
    auto shifted = [&](const at::Tensor& full) {
      at::Tensor out = at::zeros_like(full);
      out.narrow(0, 0, seq - k).copy_(full.narrow(0, k, seq - k));
      return out;
    };
    at::Tensor mask = at::zeros({seq, tokens.size(1)}, at::kFloat);
    mask.narrow(0, 0, seq - k).fill_(1.0);
    b.tokens.push_back(slice_sequence(shifted(tokens)));
    b.positions.push_back(slice_sequence(shifted(positions)));
    b.labels.push_back(slice_sequence(shifted(labels)));
    b.loss_masks.push_back(slice_sequence(mask));
    b.valid_tokens.push_back(double(seq - k) * double(tokens.size(1)));
  }
  return b;
}

std::vector<LoggedStatistic> GPTModel::logged_mtp_losses(std::int64_t microbatches) {
  if (config_.mtp_layers == 0) return {};
  at::NoGradGuard no_grad;
  const ParallelContext& par = runtime_.parallel;
  // CP ranks hold shares of one sequence (TP ranks under SP the same losses:
  // the output layer gathers the sequence); DP ranks hold other data. Only the
  // last pipeline stage runs the depths (Megatron logs them from there); the
  // others add zeros, so every rank reports the values.
  at::Tensor all = mtp_tracked_losses_.defined()
                       ? sum_over(par.dp, sum_over(par.cp, mtp_tracked_losses_.clone()))
                       : at::zeros({config_.mtp_layers},
                                   at::TensorOptions().dtype(at::kDouble).device(device()));
  all = sum_over(par.pp, all).cpu();
  const double per_microbatch = 1.0 / (double(microbatches) * double(par.dp_size()));
  std::vector<LoggedStatistic> out;
  for (std::int64_t k = 0; k < config_.mtp_layers; ++k)
    out.push_back(
        {"mtp-loss", "mtp_" + std::to_string(k + 1), all[k].item<double>() * per_microbatch});
  return out;
}

}  // namespace parity
