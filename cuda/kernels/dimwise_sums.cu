#include "cuda/kernels/dimwise_sums.h"

#include "cuda/kernels/device_tree.cuh"
#include "cuda/kernels/device_widen.cuh"

namespace parity::kernels {

namespace {

// Row blocks beyond this loop over rows (each row's order does not depend on it).
constexpr std::int64_t kMaxRowBlocks = 65535;

template <typename Acc>
struct Add {
  __device__ Acc operator()(Acc a, Acc b) const { return a + b; }
};
template <typename Acc>
struct ShuffleDown {
  __device__ Acc operator()(Acc v, int offset) const {
    return __shfl_down_sync(0xffffffffu, v, offset);
  }
};

template <typename T>
__device__ Acc<T> square(T v) {
  const Acc<T> w = widen_device(v);
  return w * w;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    row_sums(const T* x, std::int64_t rows, std::int64_t cols, Acc<T>* out) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * cols;
    Acc<T> p = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += kThreads) p = p + square(row[c]);
    p = block_tree_device(p, Acc<T>(0), ShuffleDown<Acc<T>>{}, Add<Acc<T>>{});
    if (threadIdx.x == 0) out[r] = p;
    __syncthreads();  // the tree's shared slots are reused by the next row
  }
}

// Pass 1: thread (chunk, column) sums its chunk's rows of the column in order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    column_chunk_sums(const T* x, std::int64_t rows, std::int64_t cols, std::int64_t chunk_rows,
                      Acc<T>* partial) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::int64_t k = blockIdx.y;
  if (c >= cols) return;
  const std::int64_t end = min(rows, (k + 1) * chunk_rows);
  Acc<T> p = 0;
  for (std::int64_t r = k * chunk_rows; r < end; ++r) p = p + square(x[r * cols + c]);
  partial[k * cols + c] = p;
}

// Pass 2: each column's chunk sums in chunk order (zeros when there are none).
template <typename Acc>
__global__ void __launch_bounds__(kThreads)
    column_finish(const Acc* partial, std::int64_t chunks, std::int64_t cols, Acc* out) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  Acc p = 0;
  for (std::int64_t k = 0; k < chunks; ++k) p = p + partial[k * cols + c];
  out[c] = p;
}

template <typename T>
cudaError_t rows_launch(const T* x, std::int64_t rows, std::int64_t cols, Acc<T>* out,
                        cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(std::min(rows, kMaxRowBlocks));
  row_sums<T><<<blocks, kThreads, 0, stream>>>(x, rows, cols, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t columns_launch(const T* x, std::int64_t rows, std::int64_t cols, Acc<T>* out,
                           void* workspace, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  const std::int64_t chunks = column_chunks(rows, cols);
  const auto column_blocks = static_cast<unsigned>(ceil_div(cols, kThreads));
  auto* partial = static_cast<Acc<T>*>(workspace);
  if (chunks > 0)
    column_chunk_sums<T>
        <<<dim3(column_blocks, static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
            x, rows, cols, column_chunk_rows(rows, cols), partial);
  column_finish<Acc<T>><<<column_blocks, kThreads, 0, stream>>>(partial, chunks, cols, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_row_sums_of_squares(const float* x, std::int64_t rows, std::int64_t cols,
                                       float* out, cudaStream_t stream) {
  return rows_launch(x, rows, cols, out, stream);
}
cudaError_t launch_row_sums_of_squares(const __nv_bfloat16* x, std::int64_t rows, std::int64_t cols,
                                       float* out, cudaStream_t stream) {
  return rows_launch(x, rows, cols, out, stream);
}
cudaError_t launch_row_sums_of_squares(const double* x, std::int64_t rows, std::int64_t cols,
                                       double* out, cudaStream_t stream) {
  return rows_launch(x, rows, cols, out, stream);
}
cudaError_t launch_column_sums_of_squares(const float* x, std::int64_t rows, std::int64_t cols,
                                          float* out, void* workspace, cudaStream_t stream) {
  return columns_launch(x, rows, cols, out, workspace, stream);
}
cudaError_t launch_column_sums_of_squares(const __nv_bfloat16* x, std::int64_t rows,
                                          std::int64_t cols, float* out, void* workspace,
                                          cudaStream_t stream) {
  return columns_launch(x, rows, cols, out, workspace, stream);
}
cudaError_t launch_column_sums_of_squares(const double* x, std::int64_t rows, std::int64_t cols,
                                          double* out, void* workspace, cudaStream_t stream) {
  return columns_launch(x, rows, cols, out, workspace, stream);
}

}  // namespace parity::kernels
