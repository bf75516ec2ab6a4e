#include "harness/config/model_mapping.h"

namespace parity {

ModelConfig model_config_from(const RunConfig& c) {
  ModelConfig m;
  m.hidden = c.hidden;
  m.heads = c.heads;
  m.ffn_hidden = c.ffn_hidden;
  m.layers = c.layers;
  m.seq = c.seq;
  m.micro_batch = c.micro_batch;
  m.vocab = c.vocab;
  switch (c.dtype) {
    case DType::fp32: m.dtype = ModelDType::fp32; break;
    case DType::fp64: m.dtype = ModelDType::fp64; break;
    case DType::bf16: m.dtype = ModelDType::bf16; break;
  }
  m.fp32_residual = c.fp32_residual;
  m.dropout = c.dropout;
  m.norm = c.norm == NormOption::rmsnorm ? NormKind::rms_norm : NormKind::layer_norm;
  m.activation = c.activation == ActivationOption::swiglu ? ActivationKind::swiglu
                                                          : ActivationKind::gelu;
  m.seed = c.seed;
  m.sequence_parallel = c.sp;
  m.gather_output = c.gather_output;
  return m;
}

std::vector<ConfigViolation> unsupported_model_options(const RunConfig& c) {
  std::vector<ConfigViolation> out;
  if (c.recompute != "none")
    out.push_back({"recompute", c.recompute,
                   "activation recompute is not supported by the model yet (use --recompute none)",
                   ConfigViolation::Kind::text});
  if (c.graphs != GraphOption::none)
    out.push_back({"graphs", std::string(to_string(c.graphs)),
                   "graph phases are not supported by the model yet (use --graphs none)",
                   ConfigViolation::Kind::text});
  return out;
}

}  // namespace parity
