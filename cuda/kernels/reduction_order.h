#pragma once
// The shape of every deterministic reduction here, shared by the kernels and
// their host twins (which replay it on the CPU):
//   1. a grid of `blocks` blocks of kThreads threads; thread g = block * kThreads
//      + lane takes the vectors (kVector consecutive elements) g, g + S, g + 2S,
//      ... with S = blocks * kThreads, each vector's elements in order, folding
//      them into its own partial starting from the identity;
//   2. each warp folds its 32 partials by the shuffle-down tree (offsets 16, 8,
//      4, 2, 1: lane l takes lane l + offset);
//   3. warp 0 folds the kWarps warp results (lanes >= kWarps hold the identity)
//      by the same tree; lane 0 writes the block's partial;
//   4. one block folds the block partials the same way (thread t takes partials
//      t, t + kThreads, ...), then steps 2 and 3.
// The grid size is a function of the element count alone (never of the device),
// so the order, and with it every bit of the result, is fixed by n.
#include <cstdint>

#include "cuda/kernels/host_device.h"

namespace parity::kernels {

inline constexpr int kThreads = 256;
inline constexpr int kWarpSize = 32;
inline constexpr int kWarps = kThreads / kWarpSize;
// 16-byte vectors: 4 fp32, 8 bf16, 2 fp64 elements per load.
inline constexpr int kVectorBytes = 16;
// Enough blocks to fill an H100 (132 SMs x 8 resident blocks) without making
// the second pass long.
inline constexpr std::int64_t kMaxBlocks = 1024;

template <typename T>
inline constexpr std::int64_t kVector = kVectorBytes / static_cast<std::int64_t>(sizeof(T));

PARITY_HD inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Blocks of the first pass over n elements of `element_bytes` each: one vector
// per thread at least, at most kMaxBlocks; 0 for n == 0.
PARITY_HD inline std::int64_t reduction_blocks(std::int64_t n, std::int64_t element_bytes) {
  const std::int64_t blocks = ceil_div(ceil_div(n, kVectorBytes / element_bytes), kThreads);
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

// A batch of reductions in one launch: item k's blocks are [first_block[k],
// first_block[k] + reduction_blocks(ns[k])) of one grid, each item reduced in
// its own order above (as if alone). Fills first_block[0, count); returns the
// grid's block count.
inline std::int64_t batch_first_blocks(const std::int64_t* ns, int count,
                                       std::int64_t element_bytes, std::int64_t* first_block) {
  std::int64_t total = 0;
  for (int k = 0; k < count; ++k) {
    first_block[k] = total;
    total += reduction_blocks(ns[k], element_bytes);
  }
  return total;
}

// Step 2 and 3 on the host: fold the kThreads partials of one block as the
// device's two shuffle trees do. `combine(a, b)` is the kernel's operator.
template <typename P, typename Combine>
P block_tree(P (&lanes)[kThreads], const P& identity, Combine combine) {
  P warps[kWarpSize];
  for (int w = 0; w < kWarpSize; ++w) warps[w] = identity;
  for (int w = 0; w < kWarps; ++w) {
    P* v = lanes + w * kWarpSize;
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
      for (int l = 0; l < offset; ++l) v[l] = combine(v[l], v[l + offset]);
    warps[w] = v[0];
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    for (int l = 0; l < offset; ++l) warps[l] = combine(warps[l], warps[l + offset]);
  return warps[0];
}

}  // namespace parity::kernels
