#include "cuda/kernels/metric_prepare.h"
#include "cuda/kernels/metric_prepare_batch.h"

#include <cstdint>

#include "cuda/kernels/device_tree.cuh"
#include "cuda/kernels/device_widen.cuh"

namespace parity::kernels {

namespace {

template <typename Acc>
struct Fold {
  __device__ MetricPrepareResult<Acc> operator()(const MetricPrepareResult<Acc>& a,
                                                 const MetricPrepareResult<Acc>& b) const {
    return metric_combine(a, b);
  }
};

template <typename Acc>
struct ShuffleDown {
  __device__ MetricPrepareResult<Acc> operator()(const MetricPrepareResult<Acc>& p,
                                                 int offset) const {
    constexpr unsigned kAll = 0xffffffffu;
    return MetricPrepareResult<Acc>{__shfl_down_sync(kAll, p.sum_squares, offset),
                                    __shfl_down_sync(kAll, p.sum, offset),
                                    __shfl_down_sync(kAll, p.min, offset),
                                    __shfl_down_sync(kAll, p.max, offset),
                                    __shfl_down_sync(kAll, p.abs_max, offset),
                                    static_cast<std::int64_t>(__shfl_down_sync(
                                        kAll, static_cast<long long>(p.nan_count), offset)),
                                    static_cast<std::int64_t>(__shfl_down_sync(
                                        kAll, static_cast<long long>(p.inf_count), offset))};
  }
};

template <typename T>
struct alignas(kVectorBytes) Vector {
  T e[kVector<T>];
};

// Pass 1 for one block of one reduction: `block` of `blocks` over x[0, n).
// `aligned`: x is 16-byte aligned, so full vectors load in one instruction (the
// order of the fold is the same either way).
template <typename T>
__device__ MetricPrepareResult<Acc<T>> fold_block(const T* x, std::int64_t n, std::int64_t block,
                                                  std::int64_t blocks) {
  using R = MetricPrepareResult<Acc<T>>;
  constexpr std::int64_t kV = kVector<T>;
  const R identity = metric_identity<Acc<T>>();
  const bool aligned = reinterpret_cast<std::uintptr_t>(x) % kVectorBytes == 0;
  const std::int64_t vectors = (n + kV - 1) / kV;
  const std::int64_t stride = blocks * kThreads;
  R p = identity;
  for (std::int64_t v = block * kThreads + threadIdx.x; v < vectors; v += stride) {
    if (aligned && (v + 1) * kV <= n) {
      const Vector<T> chunk = reinterpret_cast<const Vector<T>*>(x)[v];
#pragma unroll
      for (int k = 0; k < kV; ++k) metric_accumulate(p, widen_device(chunk.e[k]));
    } else {
      const std::int64_t end = min(n, (v + 1) * kV);
      for (std::int64_t i = v * kV; i < end; ++i) metric_accumulate(p, widen_device(x[i]));
    }
  }
  return block_tree_device(p, identity, ShuffleDown<Acc<T>>{}, Fold<Acc<T>>{});
}

// Pass 2 for one reduction: one block folds its `blocks` partials (identities when none).
template <typename Acc>
__device__ MetricPrepareResult<Acc> fold_partials(const MetricPrepareResult<Acc>* partials,
                                                  std::int64_t blocks) {
  const MetricPrepareResult<Acc> identity = metric_identity<Acc>();
  MetricPrepareResult<Acc> p = identity;
  for (std::int64_t i = threadIdx.x; i < blocks; i += kThreads) p = metric_combine(p, partials[i]);
  return block_tree_device(p, identity, ShuffleDown<Acc>{}, Fold<Acc>{});
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    prepare_blocks(const T* x, std::int64_t n, MetricPrepareResult<Acc<T>>* partials) {
  const auto p = fold_block(x, n, blockIdx.x, gridDim.x);
  if (threadIdx.x == 0) partials[blockIdx.x] = p;
}

template <typename Acc>
__global__ void __launch_bounds__(kThreads)
    prepare_finish(const MetricPrepareResult<Acc>* partials, std::int64_t blocks,
                   MetricPrepareResult<Acc>* out) {
  const auto p = fold_partials(partials, blocks);
  if (threadIdx.x == 0) *out = p;
}

// The batch's pass 1: block b belongs to the last item whose first block is <= b
// (an empty item shares its first block with the next item, so it is never picked).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    prepare_batch_blocks(const MetricPrepareItem<T, Acc<T>>* items, int count,
                         MetricPrepareResult<Acc<T>>* partials) {
  const std::int64_t b = blockIdx.x;
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (items[mid].first_block <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  const MetricPrepareItem<T, Acc<T>> item = items[lo];
  const auto p =
      fold_block(item.x, item.n, b - item.first_block, reduction_blocks(item.n, sizeof(T)));
  if (threadIdx.x == 0) partials[b] = p;
}

// The batch's pass 2: block k finishes item k.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    prepare_batch_finish(const MetricPrepareItem<T, Acc<T>>* items,
                         const MetricPrepareResult<Acc<T>>* partials) {
  const MetricPrepareItem<T, Acc<T>> item = items[blockIdx.x];
  const auto p = fold_partials(partials + item.first_block, reduction_blocks(item.n, sizeof(T)));
  if (threadIdx.x == 0) *item.out = p;
}

template <typename T>
cudaError_t launch(const T* x, std::int64_t n, MetricPrepareResult<Acc<T>>* out, void* workspace,
                   cudaStream_t stream) {
  using R = MetricPrepareResult<Acc<T>>;
  const std::int64_t blocks = reduction_blocks(n, sizeof(T));
  R* partials = static_cast<R*>(workspace);
  if (blocks > 0)
    prepare_blocks<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, partials);
  prepare_finish<Acc<T>><<<1, kThreads, 0, stream>>>(partials, blocks, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_batch(const MetricPrepareItem<T, Acc<T>>* items, int count,
                         std::int64_t total_blocks, void* workspace, cudaStream_t stream) {
  using R = MetricPrepareResult<Acc<T>>;
  if (count == 0) return cudaSuccess;
  R* partials = static_cast<R*>(workspace);
  if (total_blocks > 0)
    prepare_batch_blocks<T>
        <<<static_cast<unsigned>(total_blocks), kThreads, 0, stream>>>(items, count, partials);
  prepare_batch_finish<T><<<static_cast<unsigned>(count), kThreads, 0, stream>>>(items, partials);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_metric_prepare(const float* x, std::int64_t n, MetricPrepareResult<float>* out,
                                  void* workspace, cudaStream_t stream) {
  return launch(x, n, out, workspace, stream);
}
cudaError_t launch_metric_prepare(const __nv_bfloat16* x, std::int64_t n,
                                  MetricPrepareResult<float>* out, void* workspace,
                                  cudaStream_t stream) {
  return launch(x, n, out, workspace, stream);
}
cudaError_t launch_metric_prepare(const double* x, std::int64_t n, MetricPrepareResult<double>* out,
                                  void* workspace, cudaStream_t stream) {
  return launch(x, n, out, workspace, stream);
}

cudaError_t launch_metric_prepare_batch(const MetricPrepareItem<float, float>* items, int count,
                                        std::int64_t total_blocks, void* workspace,
                                        cudaStream_t stream) {
  return launch_batch(items, count, total_blocks, workspace, stream);
}
cudaError_t launch_metric_prepare_batch(const MetricPrepareItem<__nv_bfloat16, float>* items,
                                        int count, std::int64_t total_blocks, void* workspace,
                                        cudaStream_t stream) {
  return launch_batch(items, count, total_blocks, workspace, stream);
}
cudaError_t launch_metric_prepare_batch(const MetricPrepareItem<double, double>* items, int count,
                                        std::int64_t total_blocks, void* workspace,
                                        cudaStream_t stream) {
  return launch_batch(items, count, total_blocks, workspace, stream);
}

}  // namespace parity::kernels
