#pragma once
// Steps 2 and 3 of reduction_order.h on the device: the warp shuffle-down tree,
// then warp 0 folding the warp results, for any partial type P given a
// shuffle (`shfl_down(p, offset)`) and its operator (`combine(a, b)`).
#include "cuda/kernels/reduction_order.h"

namespace parity::kernels {

template <typename P, typename Shuffle, typename Combine>
__device__ P warp_tree(P p, Shuffle shfl_down, Combine combine) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) p = combine(p, shfl_down(p, offset));
  return p;
}

// The block's fold, valid in thread 0. Every thread of the block must call it.
template <typename P, typename Shuffle, typename Combine>
__device__ P block_tree_device(P p, const P& identity, Shuffle shfl_down, Combine combine) {
  __shared__ P warps[kWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  p = warp_tree(p, shfl_down, combine);
  if (lane == 0) warps[warp] = p;
  __syncthreads();
  if (warp == 0) p = warp_tree(lane < kWarps ? warps[lane] : identity, shfl_down, combine);
  return p;
}

}  // namespace parity::kernels
