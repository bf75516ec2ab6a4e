#pragma once
// Deterministic initialization and inputs.
//
// Every parameter depends only on (seed, canonical parameter name): the FULL
// tensor is generated from a CPU generator seeded with seed_for(seed, name)
// (FNV-1a 64, harness/backend/stable_hash.h), in fp64, then cast to the model
// dtype; a rank slices its shard from it. So a sharded run and a single-rank run
// compute the same function. Inputs depend only on (seed, global microbatch
// index).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace parity {

enum class InitKind : std::int8_t {
  normal,           // N(0, std^2)
  ones_plus_noise,  // 1 + N(0, std^2): norm weights (Megatron uses ones; parity
                    // perturbs them so a mis-sliced or mis-wired weight shows)
};

// How a parameter is split over TP. `dim` < 0: replicated. Otherwise the full
// tensor's `dim` is viewed as `parts` stacked blocks (e.g. SwiGLU's fc1 is
// [gate; up]), each block split into tp equal chunks, and rank r holds the
// concatenation of chunk r of every block (Megatron's per-rank [gate_r; up_r]).
struct ShardSpec {
  std::int64_t dim = -1;
  std::int64_t parts = 1;
  bool replicated() const { return dim < 0; }
  static ShardSpec replicate() { return {}; }
  static ShardSpec along(std::int64_t dim, std::int64_t parts = 1) { return {dim, parts}; }
};

at::Tensor full_parameter(std::uint64_t seed, const std::string& name,
                          const std::vector<std::int64_t>& shape, InitKind kind, double std,
                          at::ScalarType dtype);
at::Tensor shard_of(const at::Tensor& full, const ShardSpec& spec, int rank, int size);
// The inverse of shard_of over all ranks' shards (in rank order).
at::Tensor unshard(const std::vector<at::Tensor>& shards, const ShardSpec& spec);

// One microbatch of the global batch: token ids and next-token labels, both
// int64 [seq, micro_batch] (Megatron's [s, b] activation order), in
// [0, vocab). Depends only on (seed, global microbatch index).
struct MicrobatchData {
  at::Tensor tokens;
  at::Tensor labels;
};
MicrobatchData microbatch_data(std::uint64_t seed, std::int64_t global_microbatch, std::int64_t seq,
                               std::int64_t micro_batch, std::int64_t vocab);

}  // namespace parity
