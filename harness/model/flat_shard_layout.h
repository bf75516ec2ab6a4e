#pragma once
// Megatron's distributed optimizer (--distributed-optimizer) under parity's
// optimizers (optimizer.h: SGD, Adam). The dense parameters, flattened in parameter order into one
// buffer padded to a multiple of dp, are split into dp equal ranges (FlatShard placements): DP rank
// d updates range d only (where Megatron keeps the fp32 master weights and the optimizer state) and
// the updated buffer is all-gathered over DP. The gradient norms of the optimizer
// (parameter_norms.h) count each rank's ranges and all-reduce over DP.
//
// Deviations, both without numerical effect: gradients are all-reduced whole by
// finalize_grads instead of reduce-scattered (Gloo 1.13 has no reduce-scatter,
// pitfalls.md), so only the update and the norms see the split; the split is
// over the DP group, where Megatron's spans DP x CP. Routed experts are not
// split (Megatron splits them over the expert-data-parallel group, which
// parity does not form): every rank updates its own.
#include <cstdint>
#include <functional>
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
  // This rank's first element of the flat buffer: dp_rank * shard_elements().
  std::int64_t shard_begin() const { return begin_; }
  // Parameter `index`'s first element in the flat buffer; -1 for an expert.
  std::int64_t flat_offset(std::size_t index) const { return offset_.at(index); }
  std::int64_t numel(std::size_t index) const { return numel_.at(index); }
  int dp_size() const { return dp_size_; }

  // Where parameter `index`'s owned elements sit in this rank's flat shard
  // (the optimizer state's place): owned(index).begin + offset - begin; -1
  // for an expert (its state is its own, whole).
  std::int64_t shard_offset(std::size_t index) const;

  // `update(index, value, grad, shard_offset)` on every parameter's owned
  // elements (value: a 1-D view into the parameter to change in place; grad:
  // the same elements of its gradient; an expert's whole tensors, shard_offset
  // -1), then the all-gather over `dp` (null or size 1: nothing to gather)
  // writes every rank's range back into the parameters' storage. Every DP rank
  // must call it.
  using PieceUpdate = std::function<void(std::size_t index, at::Tensor& value,
                                         const at::Tensor& grad, std::int64_t shard_offset)>;
  void update(std::vector<Parameter>& params, const PieceUpdate& fn, Communicator* dp) const;
  // update() with p -= lr * grad.
  void sgd_step(std::vector<Parameter>& params, double lr, Communicator* dp) const;

 private:
  std::vector<std::int64_t> offset_;  // first element in the flat buffer; -1: an expert
  std::vector<std::int64_t> numel_;
  std::int64_t shard_ = 0, begin_ = 0;  // this rank's [begin_, begin_ + shard_)
  int dp_size_ = 1;
};

}  // namespace parity
