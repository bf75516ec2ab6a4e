#pragma once
// The norms Megatron's optimizer computes for gradient clipping and logging
// (get_grad_norm_fp32, calc_params_l2_norm), over the parameters as they are
// placed: each rank sums the squares of what it holds and the sums are
// all-reduced over the groups that split the parameters, each element counted
// once:
//   TP-sharded   every TP rank counts its shard; sums over TP
//   TP replica   (norm weights, row-parallel biases, the router; SP or not)
//                only TP rank 0 counts it (Megatron's
//                param_is_not_tensor_parallel_duplicate)
//   expert       the rank holding it counts its TP piece; sums over TP and EP
//                (the EP group holds every expert once)
//   FlatShard    under --distributed-optimizer each DP rank counts its flat
//                ranges of the dense parameters; sums over DP too
// Gradients and values are replicated over CP and DP otherwise, so nothing
// else is reduced. The last pipeline stage's copy of the word embeddings
// (Parameter::shared) is skipped: the first stage counts them (Megatron's
// param_is_not_shared). In fp64; every rank returns the same values.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/gpt_model.h"

namespace parity {

class FlatShardLayout;

enum class NormOf : std::int8_t { gradients, values };

struct ParameterNorms {
  double global = 0;  // every parameter
  double layers = 0;  // the decoder's and the MTP layers' parameters
  // Per layer, by Parameter::layer: ("decoder.layers.<i>", norm) for the
  // decoder's, then ("mtp.layers.<k>", norm) for each MTP layer module.
  std::vector<std::pair<std::string, double>> per_layer;
};

// The label of layer `number` of a model with `decoder_layers` decoder layers:
// "decoder.layers.<number>", or "mtp.layers.<number - decoder_layers>" for an
// MTP layer (Megatron's layer label of its parameters' names).
std::string layer_label_of(std::int64_t number, std::int64_t decoder_layers);

// `layout` null: no distributed optimizer. Every rank must call it (collectives
// over tp, ep and, with a layout, dp). Gradients must exist (after finalize_grads).
ParameterNorms parameter_norms(GPTModel& model, NormOf of, const FlatShardLayout* layout);

}  // namespace parity
