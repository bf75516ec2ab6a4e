#pragma once
// Multi-token prediction (Megatron's MultiTokenPredictionLayer, DeepSeek-V3's
// MTP; docs/model.md "Multi-token prediction"). Depth k (1-based) predicts the
// token k+1 positions ahead: it embeds the tokens shifted k to the left with
// the model's word (and position) embeddings, normalizes them (enorm) and the
// previous depth's hidden states (hnorm, the decoder's output for k = 1),
// concatenates [embedding, hidden] and projects 2h -> h (eh_proj, column
// parallel, gathered over TP, scattered back to the SP region), runs one
// dense transformer layer and a final norm. The model's output layer (shared,
// tied to the embeddings without --untie) makes the depth's logits.
//
// Under full recompute the projection, the layer and the final norm of every
// depth run in one reentrant checkpoint (Megatron's _checkpointed_forward of
// _proj_and_transformer_layer). With mtp_repeated_layer every depth runs the
// same layer (Megatron's mtp_use_repeated_layer), so its weights are used in
// mtp_layers checkpoints in one backward.
//
// parity's sites inside the MTP layer (the attention, MLP and norm probes) are
// not observed: the MTP depths are observed by their logits (mtp_logits.<k-1>,
// owner output_layer) only, as in Megatron.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/model/gpt_model.h"

namespace parity {

// One microbatch's MTP inputs, per depth k = 1..mtp_layers at index k-1, this
// rank's part of the sequence ([s_local, b], positions [s_local]): Megatron's
// roll_tensor(shifts=-1) applied k times to the whole sequence (the last k
// positions hold token 0, position 0, label 0, loss mask 0).
struct MtpBatch {
  std::vector<at::Tensor> tokens, positions, labels, loss_masks;
  // Depth k's positions that count over the microbatch's whole sequences:
  // (seq - k) * micro_batch (the denominator of its mean loss on every rank).
  std::vector<double> valid_tokens;
};

class MultiTokenPredictionLayer : public Module {
 public:
  // `layer_number`: its transformer layer's global number, after the decoder's
  // (pipeline_layout.h's mtp_transformer_layer_number).
  MultiTokenPredictionLayer(const std::string& name, const ModelConfig* config,
                            ParameterFactory& params, const ParallelContext& parallel,
                            std::int64_t layer_number);
  ~MultiTokenPredictionLayer() override;
  // Megatron's TransformerLayer.layer_number - 1 of the depth's layer: what its
  // per-layer statistics are filed under (Parameter::layer).
  std::int64_t layer_number() const { return layer_number_; }
  // embedded [s(/tp), b, h] (the shifted tokens' embedding), hidden [s(/tp), b, h]
  // (the previous depth's output); positions [s_local] the rank's global
  // positions (rope). Returns the depth's hidden states [s(/tp), b, h].
  at::Tensor forward(const ModelRuntime& rt, const at::Tensor& embedded, const at::Tensor& hidden,
                     const at::Tensor& positions) const;

 private:
  std::int64_t layer_number_;
  Norm enorm_, hnorm_;
  ColumnParallelLinear eh_proj_;
  TransformerLayer layer_;
  Norm final_layernorm_;
};

}  // namespace parity
