#include "harness/model/parameter_norms.h"

#include <ATen/ATen.h>

#include <cctype>
#include <cmath>

#include "harness/faults/code_path_faults.h"
#include "harness/model/flat_shard_layout.h"

namespace parity {

namespace {

// The decoder layer of a parameter name ("decoder.layers.3.mlp..." -> 3), -1 if none.
std::int64_t layer_of(const std::string& name) {
  static const std::string prefix = "decoder.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  std::int64_t i = 0;
  std::size_t k = prefix.size();
  if (k >= name.size() || !std::isdigit(static_cast<unsigned char>(name[k]))) return -1;
  while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k])))
    i = i * 10 + (name[k++] - '0');
  return i;
}

at::Tensor sum_over(Communicator* c, const at::Tensor& t) {
  return c && c->size() > 1 ? c->all_reduce(t.contiguous(), ReduceOp::sum) : t;
}

}  // namespace

ParameterNorms parameter_norms(GPTModel& model, NormOf of, const FlatShardLayout* layout) {
  at::NoGradGuard no_grad;
  const ParallelContext& par = model.parallel();
  const std::int64_t L = model.config().layers;
  // [dense: global, layer 0..L-1 | experts: global, layer 0..L-1], squares in fp64.
  at::Tensor sums = at::zeros({2 * (L + 1)}, at::kDouble);
  double* s = sums.data_ptr<double>();
  const std::vector<Parameter>& params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    const bool expert = p.expert >= 0;
    // Fault replica-marked-tp-sharded (ROCm/TransformerEngine PR 715): a
    // replicated parameter is taken for a TP shard, so every TP rank counts it.
    if (!expert && p.shard.replicated() && par.tp_rank() != 0 &&
        !fault_active(CodePathFault::replica_marked_tp_sharded))
      continue;
    at::Tensor t = of == NormOf::gradients ? p.value.grad() : p.value.detach();
    if (!t.defined()) continue;
    t = t.reshape({-1});
    if (layout) {
      const FlatShardLayout::Range r = layout->owned(i);
      t = t.narrow(0, r.begin, r.size());
    }
    const double squares = t.to(at::kDouble).pow(2).sum().item<double>();
    const std::int64_t base = expert ? L + 1 : 0;
    s[base] += squares;
    const std::int64_t layer = layer_of(p.name);
    if (layer >= 0 && layer < L) s[base + 1 + layer] += squares;
  }
  sums = sum_over(par.tp, sums);
  at::Tensor dense = sums.narrow(0, 0, L + 1), experts = sums.narrow(0, L + 1, L + 1);
  if (layout) dense = sum_over(par.dp, dense);
  experts = sum_over(par.ep, experts);
  const at::Tensor total = (dense + experts).cpu();
  const double* v = total.data_ptr<double>();
  ParameterNorms out;
  out.global = std::sqrt(v[0]);
  double layers = 0;
  for (std::int64_t l = 0; l < L; ++l) {
    layers += v[1 + l];
    out.per_layer.emplace_back("decoder.layers." + std::to_string(l), std::sqrt(v[1 + l]));
  }
  out.layers = std::sqrt(layers);
  return out;
}

}  // namespace parity
