#pragma once
// The column sums' chunking (dimwise_sums.h), shared by kernel and twin: a
// function of the shape only, so the order of every column's sum is fixed.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/kernels/reduction_order.h"

namespace parity::kernels {

// Rows of at least kMinChunkRows per chunk, and no more chunks than keep about
// kColumnThreads threads busy in pass 1 (the workspace is chunks * cols values)
// or than a grid's y dimension holds.
inline constexpr std::int64_t kMinChunkRows = 16;
inline constexpr std::int64_t kColumnThreads = std::int64_t{1} << 18;
inline constexpr std::int64_t kMaxChunks = 65535;

inline std::int64_t column_chunks(std::int64_t rows, std::int64_t cols) {
  if (rows == 0 || cols == 0) return 0;
  const std::int64_t by_threads = std::max<std::int64_t>(1, kColumnThreads / cols);
  return std::min({ceil_div(rows, kMinChunkRows), by_threads, kMaxChunks});
}

inline std::int64_t column_chunk_rows(std::int64_t rows, std::int64_t cols) {
  const std::int64_t chunks = column_chunks(rows, cols);
  return chunks == 0 ? 0 : ceil_div(rows, chunks);
}

template <typename Acc>
std::size_t column_sums_workspace_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(column_chunks(rows, cols) * cols) * sizeof(Acc);
}

}  // namespace parity::kernels
