#include "harness/model/flat_shard_layout.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace parity {

FlatShardLayout::FlatShardLayout(const std::vector<Parameter>& params, int dp_rank, int dp_size)
    : dp_size_(dp_size) {
  std::int64_t total = 0;
  for (const Parameter& p : params) {
    numel_.push_back(p.value.numel());
    offset_.push_back(p.expert >= 0 ? -1 : total);
    if (p.expert < 0) total += p.value.numel();
  }
  shard_ = (total + dp_size - 1) / dp_size;
  begin_ = shard_ * dp_rank;
}

FlatShardLayout::Range FlatShardLayout::owned(std::size_t index) const {
  const std::int64_t first = offset_.at(index), n = numel_.at(index);
  if (first < 0) return {0, n};
  const std::int64_t begin = std::clamp(begin_ - first, std::int64_t{0}, n);
  const std::int64_t end = std::clamp(begin_ + shard_ - first, std::int64_t{0}, n);
  return {begin, std::max(begin, end)};
}

std::int64_t FlatShardLayout::shard_offset(std::size_t index) const {
  if (offset_.at(index) < 0) return -1;
  return offset_[index] + owned(index).begin - begin_;
}

void FlatShardLayout::update(std::vector<Parameter>& params, const PieceUpdate& fn,
                             Communicator* dp) const {
  at::NoGradGuard no_grad;
  at::Tensor mine;
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::Tensor value = params[i].value;
    const at::Tensor grad = params[i].value.grad();
    if (offset_[i] < 0) {
      at::Tensor whole = value.view({-1});
      fn(i, whole, grad.reshape({-1}), -1);
      continue;
    }
    if (!mine.defined()) mine = at::zeros({shard_}, value.options().requires_grad(false));
    const Range r = owned(i);
    if (r.size() == 0) continue;
    at::Tensor piece = value.view({-1}).narrow(0, r.begin, r.size());
    fn(i, piece, grad.reshape({-1}).narrow(0, r.begin, r.size()), shard_offset(i));
    mine.narrow(0, shard_offset(i), r.size()).copy_(piece);
  }
  if (!mine.defined() || dp == nullptr || dp->size() == 1) return;
  const at::Tensor all = dp->all_gather(mine, 0);  // [dp * shard_]: the whole buffer
  for (std::size_t i = 0; i < params.size(); ++i)
    if (offset_[i] >= 0) params[i].value.view({-1}).copy_(all.narrow(0, offset_[i], numel_[i]));
}

void FlatShardLayout::sgd_step(std::vector<Parameter>& params, double lr, Communicator* dp) const {
  update(
      params,
      [lr](std::size_t, at::Tensor& value, const at::Tensor& grad, std::int64_t) {
        value.sub_(grad, lr);
      },
      dp);
}

}  // namespace parity
