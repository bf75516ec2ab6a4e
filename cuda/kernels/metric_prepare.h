#pragma once
// Metric prepare in one read: sum of squares, sum, min, max, abs-max, NaN and
// Inf counts of n contiguous elements, written to `out` (device memory) with no
// host synchronization; the order of the fold is reduction_order.h's, the same
// as metric_prepare_twin's. `workspace`: device memory of
// metric_prepare_workspace_bytes<Acc>(n, sizeof(T)) bytes (block partials), or
// nullptr when that is 0. A strided tensor is copied contiguous by the caller.
// A LibTorch caller passes data_ptr(), numel() and the current stream; the
// launches are stream-ordered and capturable in a CUDA graph.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda/kernels/metric_stats.h"

namespace parity::kernels {

cudaError_t launch_metric_prepare(const float* x, std::int64_t n, MetricPrepareResult<float>* out,
                                  void* workspace, cudaStream_t stream);
cudaError_t launch_metric_prepare(const __nv_bfloat16* x, std::int64_t n,
                                  MetricPrepareResult<float>* out, void* workspace,
                                  cudaStream_t stream);
cudaError_t launch_metric_prepare(const double* x, std::int64_t n, MetricPrepareResult<double>* out,
                                  void* workspace, cudaStream_t stream);

}  // namespace parity::kernels
