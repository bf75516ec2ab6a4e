#include "harness/model/flat_shard_layout.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace parity {

FlatShardLayout::FlatShardLayout(const std::vector<Parameter>& params, int dp_rank, int dp_size) {
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

void FlatShardLayout::sgd_step(std::vector<Parameter>& params, double lr, Communicator* dp) const {
  at::NoGradGuard no_grad;
  at::Tensor mine;
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::Tensor value = params[i].value;
    const at::Tensor grad = params[i].value.grad();
    if (offset_[i] < 0) {
      value.sub_(grad, lr);
      continue;
    }
    if (!mine.defined()) mine = at::zeros({shard_}, value.options().requires_grad(false));
    const Range r = owned(i);
    if (r.size() == 0) continue;
    at::Tensor piece = value.view({-1}).narrow(0, r.begin, r.size());
    piece.sub_(grad.reshape({-1}).narrow(0, r.begin, r.size()), lr);
    mine.narrow(0, offset_[i] + r.begin - begin_, r.size()).copy_(piece);
  }
  if (!mine.defined() || dp == nullptr || dp->size() == 1) return;
  const at::Tensor all = dp->all_gather(mine, 0);  // [dp * shard_]: the whole buffer
  for (std::size_t i = 0; i < params.size(); ++i)
    if (offset_[i] >= 0) params[i].value.view({-1}).copy_(all.narrow(0, offset_[i], numel_[i]));
}

}  // namespace parity
