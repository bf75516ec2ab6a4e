#include "harness/model/parameter_norms.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "harness/faults/code_path_faults.h"
#include "harness/model/flat_shard_layout.h"

PARITY_USES_FAULT(collective_skipped_when_zero);
PARITY_USES_FAULT(etp_reduced_over_tp);
PARITY_USES_FAULT(replica_marked_tp_sharded);
PARITY_USES_FAULT(tied_embedding_norm_twice);

namespace parity {

std::string layer_label_of(std::int64_t number, std::int64_t decoder_layers) {
  return number < decoder_layers ? "decoder.layers." + std::to_string(number)
                                 : "mtp.layers." + std::to_string(number - decoder_layers);
}

ParameterNorms parameter_norms(GPTModel& model, NormOf of, const FlatShardLayout* layout) {
  at::NoGradGuard no_grad;
  const ParallelContext& par = model.parallel();
  const ModelConfig& c = model.config();
  // The decoder's layers, then one per MTP layer module (one for every depth
  // when they repeat one layer), by their numbers (Parameter::layer).
  const std::int64_t L =
      c.layers + (c.mtp_repeated_layer ? std::min<std::int64_t>(c.mtp_layers, 1) : c.mtp_layers);
  // [dense: global, layer 0..L-1 | experts: global, layer 0..L-1], squares in
  // fp64 on the model's device (the communicators' tensors; no host sync here).
  std::vector<at::Tensor> squares;
  std::vector<std::int64_t> slots;
  const std::vector<Parameter>& params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    const bool expert = p.expert >= 0;
    // Fault replica-marked-tp-sharded (ROCm/TransformerEngine PR 715): a
    // replicated parameter is taken for a TP shard, so every TP rank counts it.
    if (!expert && p.shard.replicated() && par.tp_rank() != 0 &&
        !fault_active(fault_replica_marked_tp_sharded))
      continue;
    // The last stage's copy of the word embeddings counts on the first stage
    // (Megatron's param_is_not_shared). Fault tied-embedding-norm-twice
    // (NVIDIA/Megatron-LM #7227): the copy is counted too.
    if (p.shared && !fault_active(fault_tied_embedding_norm_twice)) continue;
    at::Tensor t = of == NormOf::gradients ? p.value.grad() : p.value.detach();
    if (!t.defined()) continue;
    t = t.reshape({-1});
    if (layout) {
      const FlatShardLayout::Range r = layout->owned(i);
      t = t.narrow(0, r.begin, r.size());
    }
    const at::Tensor sq = t.to(at::kDouble).pow(2).sum();
    const std::int64_t base = expert ? L + 1 : 0;
    squares.push_back(sq);
    slots.push_back(base);
    if (p.layer >= 0 && p.layer < L) {
      squares.push_back(sq);
      slots.push_back(base + 1 + p.layer);
    }
  }
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(model.device());
  at::Tensor sums = at::zeros({2 * (L + 1)}, f64);
  if (!squares.empty())
    sums.index_add_(0, at::tensor(slots, at::kLong).to(model.device()), at::stack(squares));
  if (par.etp == nullptr) {
    sums = sum_over(par.tp, sums);
  } else {
    // The experts' pieces lie over the expert TP group (Megatron's expert norm
    // reduces over the expert tensor-model-pipeline group). Fault
    // etp-reduced-over-tp: over the dense TP group, as the dense pieces.
    const at::Tensor experts_here = sums.narrow(0, L + 1, L + 1);
    sums = at::cat(
        {sum_over(par.tp, sums.narrow(0, 0, L + 1)),
         sum_over(fault_active(fault_etp_reduced_over_tp) ? par.tp : par.etp, experts_here)});
  }
  // Each stage holds its own layers (Megatron's norm reduces over the
  // model-parallel group, pipeline included).
  sums = sum_over(par.pp, sums);
  at::Tensor dense = sums.narrow(0, 0, L + 1), experts = sums.narrow(0, L + 1, L + 1);
  if (layout) dense = sum_over(par.dp, dense);
  // Fault collective-skipped-when-zero: an EP rank whose experts no token
  // reached (all squares zero) skips the EP sum its peers wait in.
  const bool skip =
      fault_active(fault_collective_skipped_when_zero) && !experts.ne(0).any().item<bool>();
  if (!skip) experts = sum_over(par.ep, experts);
  const at::Tensor total = (dense + experts).cpu();
  const double* v = total.data_ptr<double>();
  ParameterNorms out;
  out.global = std::sqrt(v[0]);
  double layers = 0;
  for (std::int64_t l = 0; l < L; ++l) {
    layers += v[1 + l];
    out.per_layer.emplace_back(layer_label_of(l, c.layers), std::sqrt(v[1 + l]));
  }
  out.layers = std::sqrt(layers);
  return out;
}

}  // namespace parity
