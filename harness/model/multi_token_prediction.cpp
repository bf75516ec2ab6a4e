#include "harness/model/multi_token_prediction.h"

#include <ATen/ATen.h>

#include "harness/backend/tp_mappings.h"

namespace parity {

MultiTokenPredictionLayer::MultiTokenPredictionLayer(std::string name, const ModelConfig* config,
                                                     ParameterFactory& params,
                                                     const ParallelContext& parallel)
    : Module(name, config),
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

}  // namespace parity
