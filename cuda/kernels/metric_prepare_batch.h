#pragma once
// Several observations' metric prepare in two launches (instead of two each):
// the items of one element type share one grid (reduction_order.h's
// batch_first_blocks), each reduced in exactly its single launch's order, so
// every item's result is bit for bit launch_metric_prepare's (and
// metric_prepare_twin's). Pays where a step observes many small tensors.
//
// items: a device array of `count` descriptors (a LibTorch caller fills a
// pinned host array, or a CPU tensor, and copies it on the stream);
// total_blocks: batch_first_blocks' return value; workspace: total_blocks *
// sizeof(MetricPrepareResult<Acc>) bytes of device memory (nullptr if 0).
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda/kernels/metric_stats.h"

namespace parity::kernels {

template <typename T, typename Acc>
struct MetricPrepareItem {
  const T* x;  // n contiguous elements
  std::int64_t n;
  MetricPrepareResult<Acc>* out;  // device memory
  std::int64_t first_block;       // batch_first_blocks' first_block[k]
};

cudaError_t launch_metric_prepare_batch(const MetricPrepareItem<float, float>* items, int count,
                                        std::int64_t total_blocks, void* workspace,
                                        cudaStream_t stream);
cudaError_t launch_metric_prepare_batch(const MetricPrepareItem<__nv_bfloat16, float>* items,
                                        int count, std::int64_t total_blocks, void* workspace,
                                        cudaStream_t stream);
cudaError_t launch_metric_prepare_batch(const MetricPrepareItem<double, double>* items, int count,
                                        std::int64_t total_blocks, void* workspace,
                                        cudaStream_t stream);

}  // namespace parity::kernels
