#include "cuda/kernels/dimwise_sums_twin.h"

#include <vector>

#include "cuda/kernels/dimwise_order.h"
#include "cuda/kernels/widen.h"

namespace parity::kernels {

namespace {

template <typename T>
Acc<T> square(T v) {
  const Acc<T> w = widen(v);
  return w * w;
}

template <typename T>
void rows_of(const T* x, std::int64_t rows, std::int64_t cols, Acc<T>* out) {
  const auto add = [](Acc<T> a, Acc<T> b) { return a + b; };
  Acc<T> lanes[kThreads];
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * cols;
    for (int t = 0; t < kThreads; ++t) {
      Acc<T> p = 0;
      for (std::int64_t c = t; c < cols; c += kThreads) p = p + square(row[c]);
      lanes[t] = p;
    }
    out[r] = block_tree(lanes, Acc<T>(0), add);
  }
}

template <typename T>
void columns_of(const T* x, std::int64_t rows, std::int64_t cols, Acc<T>* out) {
  const std::int64_t chunks = column_chunks(rows, cols);
  const std::int64_t chunk_rows = column_chunk_rows(rows, cols);
  std::vector<Acc<T>> partial(static_cast<std::size_t>(chunks * cols));
  for (std::int64_t k = 0; k < chunks; ++k)
    for (std::int64_t c = 0; c < cols; ++c) {
      Acc<T> p = 0;
      const std::int64_t end = std::min(rows, (k + 1) * chunk_rows);
      for (std::int64_t r = k * chunk_rows; r < end; ++r) p = p + square(x[r * cols + c]);
      partial[static_cast<std::size_t>(k * cols + c)] = p;
    }
  for (std::int64_t c = 0; c < cols; ++c) {
    Acc<T> p = 0;
    for (std::int64_t k = 0; k < chunks; ++k)
      p = p + partial[static_cast<std::size_t>(k * cols + c)];
    out[c] = p;
  }
}

}  // namespace

void row_sums_of_squares_twin(const float* x, std::int64_t rows, std::int64_t cols, float* out) {
  rows_of(x, rows, cols, out);
}
void row_sums_of_squares_twin(const Bf16* x, std::int64_t rows, std::int64_t cols, float* out) {
  rows_of(x, rows, cols, out);
}
void row_sums_of_squares_twin(const double* x, std::int64_t rows, std::int64_t cols, double* out) {
  rows_of(x, rows, cols, out);
}
void column_sums_of_squares_twin(const float* x, std::int64_t rows, std::int64_t cols, float* out) {
  columns_of(x, rows, cols, out);
}
void column_sums_of_squares_twin(const Bf16* x, std::int64_t rows, std::int64_t cols, float* out) {
  columns_of(x, rows, cols, out);
}
void column_sums_of_squares_twin(const double* x, std::int64_t rows, std::int64_t cols,
                                 double* out) {
  columns_of(x, rows, cols, out);
}

}  // namespace parity::kernels
