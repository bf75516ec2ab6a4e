#include "cuda/kernels/metric_prepare.h"

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

// Pass 1: each block folds its threads' grid-stride vectors into partials[block].
// Aligned: x is 16-byte aligned, so full vectors load in one instruction (the
// order of the fold is the same either way).
template <typename T, bool Aligned>
__global__ void __launch_bounds__(kThreads)
    prepare_blocks(const T* x, std::int64_t n, MetricPrepareResult<Acc<T>>* partials) {
  using R = MetricPrepareResult<Acc<T>>;
  constexpr std::int64_t kV = kVector<T>;
  const R identity = metric_identity<Acc<T>>();
  const std::int64_t vectors = (n + kV - 1) / kV;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  R p = identity;
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; v < vectors;
       v += stride) {
    if (Aligned && (v + 1) * kV <= n) {
      const Vector<T> chunk = reinterpret_cast<const Vector<T>*>(x)[v];
#pragma unroll
      for (int k = 0; k < kV; ++k) metric_accumulate(p, widen_device(chunk.e[k]));
    } else {
      const std::int64_t end = min(n, (v + 1) * kV);
      for (std::int64_t i = v * kV; i < end; ++i) metric_accumulate(p, widen_device(x[i]));
    }
  }
  p = block_tree_device(p, identity, ShuffleDown<Acc<T>>{}, Fold<Acc<T>>{});
  if (threadIdx.x == 0) partials[blockIdx.x] = p;
}

// Pass 2: one block folds the block partials into *out (identities when none).
template <typename Acc>
__global__ void __launch_bounds__(kThreads)
    prepare_finish(const MetricPrepareResult<Acc>* partials, std::int64_t blocks,
                   MetricPrepareResult<Acc>* out) {
  const MetricPrepareResult<Acc> identity = metric_identity<Acc>();
  MetricPrepareResult<Acc> p = identity;
  for (std::int64_t i = threadIdx.x; i < blocks; i += kThreads) p = metric_combine(p, partials[i]);
  p = block_tree_device(p, identity, ShuffleDown<Acc>{}, Fold<Acc>{});
  if (threadIdx.x == 0) *out = p;
}

template <typename T>
cudaError_t launch(const T* x, std::int64_t n, MetricPrepareResult<Acc<T>>* out, void* workspace,
                   cudaStream_t stream) {
  using R = MetricPrepareResult<Acc<T>>;
  const std::int64_t blocks = reduction_blocks(n, sizeof(T));
  R* partials = static_cast<R*>(workspace);
  if (blocks > 0) {
    const bool aligned = reinterpret_cast<std::uintptr_t>(x) % kVectorBytes == 0;
    if (aligned)
      prepare_blocks<T, true>
          <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, partials);
    else
      prepare_blocks<T, false>
          <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, partials);
  }
  prepare_finish<Acc<T>><<<1, kThreads, 0, stream>>>(partials, blocks, out);
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

}  // namespace parity::kernels
