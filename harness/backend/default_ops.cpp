// The default compositions of Backend's coarser ops: today's ATen pieces and
// Megatron's mappings, moved here unchanged from the model (so the reference,
// which keeps the defaults, computes bit for bit what it did before).
#include <ATen/ATen.h>

#include "harness/backend/backend.h"
#include "harness/backend/tp_mappings.h"
#include "harness/faults/code_path_faults.h"
#include "harness/parallel/communicator.h"

PARITY_USES_FAULT(cp_kv_grad_local_only);

namespace parity {

at::Tensor Backend::vocab_parallel_embedding(const at::Tensor& ids, const at::Tensor& weight,
                                             std::int64_t vocab_start, Communicator* tp) const {
  const std::int64_t rows = weight.size(0);
  at::Tensor outside = (ids < vocab_start).logical_or(ids >= vocab_start + rows);
  at::Tensor local_ids = (ids - vocab_start).masked_fill(outside, 0);
  at::Tensor words = embedding(local_ids, weight).masked_fill(outside.unsqueeze(-1), 0);
  return reduce_from_tensor_parallel_region(words, tp);
}

at::Tensor Backend::vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                                 std::int64_t vocab_start, Communicator* tp) const {
  // Composed from differentiable pieces: the max is a detached constant (it
  // cancels), the target logit and the sum of exponentials are all-reduced
  // over TP with an identity backward.
  const at::ScalarType ct = logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor z = logits.to(ct);
  at::Tensor max = std::get<0>(z.detach().max(-1, /*keepdim=*/true));
  if (tp != nullptr && tp->size() > 1) max = tp->all_reduce(max.contiguous(), ReduceOp::max);
  at::Tensor shifted = z - max;
  const std::int64_t rows = z.size(-1);
  at::Tensor outside = (labels < vocab_start).logical_or(labels >= vocab_start + rows);
  at::Tensor local = (labels - vocab_start).masked_fill(outside, 0);
  at::Tensor target = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0);
  target = reduce_from_tensor_parallel_region(target, tp);
  at::Tensor sum_exp = reduce_from_tensor_parallel_region(shifted.exp().sum(-1), tp);
  return sum_exp.log() - target;
}

std::vector<at::Tensor> Backend::split_qkv(const at::Tensor& mixed, std::int64_t head_dim,
                                           std::int64_t groups) const {
  const std::int64_t s = mixed.size(0), b = mixed.size(1);
  const std::int64_t per_group = mixed.size(2) / groups;  // (np/ng + 2) * hn
  const std::int64_t q_width = per_group - 2 * head_dim;
  std::vector<at::Tensor> qkv =
      mixed.view({s, b, groups, per_group}).split_with_sizes({q_width, head_dim, head_dim}, -1);
  // [s, b, ng, np/ng * hn] -> [s, b, np, hn] (a view when np == ng).
  qkv[0] = qkv[0].reshape({s, b, -1, head_dim});
  return qkv;
}

at::Tensor Backend::rotary_embedding(const at::Tensor& x, const at::Tensor& positions,
                                     const RotarySpec& rotary) const {
  const std::int64_t d = rotary.dim > 0 ? rotary.dim : x.size(-1);
  // As Megatron's RotaryEmbedding: inv_freq = 1 / base^(arange(0, d, 2) / d) and
  // the outer product with the positions, both in fp32 whatever the model dtype.
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(x.device());
  at::Tensor inv_freq =
      at::pow(rotary.base, at::arange(0, d, 2, f32) / static_cast<double>(d)).reciprocal();
  at::Tensor freqs = at::outer(positions.to(f32), inv_freq);  // [s, r / 2]
  const std::int64_t r = 2 * inv_freq.size(0);
  at::Tensor emb = rotary.interleaved ? at::stack({freqs, freqs}, -1).view({x.size(0), r})
                                      : at::cat({freqs, freqs}, -1);
  emb = emb.view({x.size(0), 1, 1, r});
  at::Tensor cos = emb.cos().to(x.scalar_type()), sin = emb.sin().to(x.scalar_type());
  const bool partial = r < x.size(-1);
  const at::Tensor t = partial ? x.narrow(-1, 0, r) : x;
  at::Tensor rotated;
  if (rotary.interleaved) {
    const at::Tensor even = t.slice(-1, 0, r, 2), odd = t.slice(-1, 1, r, 2);
    rotated = at::stack({-odd, even}, -1).flatten(-2);
  } else {
    const std::vector<at::Tensor> halves = t.chunk(2, -1);
    rotated = at::cat({-halves[1], halves[0]}, -1);
  }
  at::Tensor out = t * cos + rotated * sin;
  return partial ? at::cat({out, x.narrow(-1, r, x.size(-1) - r)}, -1) : out;
}

std::vector<at::Tensor> Backend::gather_context_parallel_kv(const at::Tensor& k,
                                                            const at::Tensor& v,
                                                            Communicator& cp) const {
  if (fault_active(fault_cp_kv_grad_local_only)) {
    // Fault cp-kv-grad-local-only (diffusers #14265): the same values, but the
    // gradient reaches this rank's keys and values through its own chunk only.
    auto local_grad_only = [&cp](const at::Tensor& t) {
      std::vector<at::Tensor> chunks =
          gather_from_sequence_parallel_region(t.detach(), &cp).chunk(cp.size(), 0);
      chunks[static_cast<std::size_t>(cp.rank())] = t;
      return at::cat(chunks, 0);
    };
    return {local_grad_only(k), local_grad_only(v)};
  }
  return {gather_from_sequence_parallel_region(k, &cp),
          gather_from_sequence_parallel_region(v, &cp)};
}

}  // namespace parity
