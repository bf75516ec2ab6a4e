#pragma once
// Megatron's distributed optimizer (--distributed-optimizer) on parity's SGD.
// The dense parameters, flattened in parameter order into one buffer padded to
// a multiple of dp, are split into dp equal ranges (FlatShard placements): DP
// rank d updates range d only (where Megatron keeps the fp32 master weights and
// the optimizer state) and the updated buffer is all-gathered over DP. The
// gradient norms of the optimizer (parameter_norms.h) count each rank's ranges
// and all-reduce over DP.
//
// Deviations, both without numerical effect: gradients are all-reduced whole by
// finalize_grads instead of reduce-scattered (Gloo 1.13 has no reduce-scatter,
// pitfalls.md), so only the update and the norms see the split; the split is
// over the DP group, where Megatron's spans DP x CP. Routed experts are not
// split (Megatron splits them over the expert-data-parallel group, which
// parity does not form): every rank updates its own.
#include <cstdint>
#include <vector>

#include "harness/model/gpt_model.h"

namespace parity {

class FlatShardLayout {
 public:
  // Elements [begin, end) of a parameter's flattened tensor.
  struct Range {
    std::int64_t begin = 0, end = 0;
    std::int64_t size() const { return end - begin; }
  };

  FlatShardLayout(const std::vector<Parameter>& params, int dp_rank, int dp_size);
  // The elements of parameter `index` this DP rank owns: a range of the flat
  // buffer (possibly empty) for a dense parameter, everything for an expert.
  Range owned(std::size_t index) const;
  std::int64_t shard_elements() const { return shard_; }

  // p -= lr * grad on the owned ranges, then the all-gather over `dp` (null or
  // size 1: nothing to gather) writes every rank's range back into the
  // parameters' storage. Every DP rank must call it.
  void sgd_step(std::vector<Parameter>& params, double lr, Communicator* dp) const;

 private:
  std::vector<std::int64_t> offset_;  // first element in the flat buffer; -1: an expert
  std::vector<std::int64_t> numel_;
  std::int64_t shard_ = 0, begin_ = 0;  // this rank's [begin_, begin_ + shard_)
};

}  // namespace parity
