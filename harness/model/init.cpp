#include "harness/model/init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "harness/backend/stable_hash.h"

namespace parity {
namespace {
at::Generator seeded(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }
}  // namespace

at::Tensor full_parameter(std::uint64_t seed, const std::string& name,
                          const std::vector<std::int64_t>& shape, InitKind kind, double std,
                          at::ScalarType dtype) {
  at::Generator gen = seeded(seed_for(seed, name));
  at::Tensor t = at::empty(shape, at::kDouble);
  t.normal_(0.0, std, gen);
  if (kind == InitKind::ones_plus_noise) t.add_(1.0);
  return t.to(dtype);
}

at::Tensor shard_of(const at::Tensor& full, const ShardSpec& spec, int rank, int size) {
  if (spec.replicated() || size == 1) return full.clone();
  TORCH_CHECK(full.size(spec.dim) % (spec.parts * size) == 0, "shard_of: dim ", spec.dim,
              " of size ", full.size(spec.dim), " is not divisible by parts (", spec.parts,
              ") x ranks (", size, ")");
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& block : full.chunk(spec.parts, spec.dim)) {
    pieces.push_back(block.chunk(size, spec.dim)[rank]);
  }
  return at::cat(pieces, spec.dim).contiguous();
}

at::Tensor unshard(const std::vector<at::Tensor>& shards, const ShardSpec& spec) {
  TORCH_CHECK(!shards.empty(), "unshard: no shards");
  if (spec.replicated() || shards.size() == 1) return shards.front().clone();
  std::vector<at::Tensor> blocks;
  for (std::int64_t p = 0; p < spec.parts; ++p) {
    std::vector<at::Tensor> chunks;
    chunks.reserve(shards.size());
    for (const at::Tensor& s : shards) chunks.push_back(s.chunk(spec.parts, spec.dim)[p]);
    blocks.push_back(at::cat(chunks, spec.dim));
  }
  return at::cat(blocks, spec.dim).contiguous();
}

MicrobatchData microbatch_data(std::uint64_t seed, std::int64_t global_microbatch, std::int64_t seq,
                               std::int64_t micro_batch, std::int64_t vocab) {
  at::Generator gen =
      seeded(seed_for(seed, "data.tokens", static_cast<std::uint64_t>(global_microbatch)));
  // seq + 1 tokens per sequence: inputs are [0, seq), labels are [1, seq].
  at::Tensor stream = at::randint(vocab, {seq + 1, micro_batch}, gen, at::kLong);
  return {stream.slice(0, 0, seq).contiguous(), stream.slice(0, 1, seq + 1).contiguous()};
}

}  // namespace parity
