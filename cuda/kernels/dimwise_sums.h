#pragma once
// Per-row and per-column sums of squares of a contiguous [rows, cols] view (the
// staged dimwise metrics' prepare: harness/metrics/statistics/dimwise_metrics.cpp sums
// x.to(acc)^2 over the last dim, or over all leading dims for columns), in the
// accumulation type (fp32 for fp32/bf16, fp64 for fp64), deterministic:
//  - rows: one block per row (grid-stride over rows); thread t takes columns t,
//    t + kThreads, ... in order, then the block tree (reduction_order.h);
//  - columns: the rows split into column_chunks(rows, cols) chunks of
//    ceil(rows / chunks) rows; pass 1 sums each (chunk, column) over its rows
//    in order into workspace[chunk * cols + column], pass 2 sums each column's
//    chunks in order. workspace: column_sums_workspace_bytes bytes.
// An empty row gives 0; rows == 0 gives cols zeros. Non-contiguous input is
// copied contiguous by the caller. No host synchronization.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda/kernels/dimwise_order.h"

namespace parity::kernels {

cudaError_t launch_row_sums_of_squares(const float* x, std::int64_t rows, std::int64_t cols,
                                       float* out, cudaStream_t stream);
cudaError_t launch_row_sums_of_squares(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols,
                                       float* out, cudaStream_t stream);
cudaError_t launch_row_sums_of_squares(const double* x, std::int64_t rows, std::int64_t cols,
                                       double* out, cudaStream_t stream);

cudaError_t launch_column_sums_of_squares(const float* x, std::int64_t rows, std::int64_t cols,
                                          float* out, void* workspace, cudaStream_t stream);
cudaError_t launch_column_sums_of_squares(const __nv_bfloat16* x, std::int64_t rows,
                                          std::int64_t cols, float* out, void* workspace,
                                          cudaStream_t stream);
cudaError_t launch_column_sums_of_squares(const double* x, std::int64_t rows, std::int64_t cols,
                                          double* out, void* workspace, cudaStream_t stream);

}  // namespace parity::kernels
