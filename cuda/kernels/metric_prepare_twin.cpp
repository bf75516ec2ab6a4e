#include "cuda/kernels/metric_prepare_twin.h"

#include <algorithm>
#include <vector>

#include "cuda/kernels/reduction_order.h"
#include "cuda/kernels/widen.h"

namespace parity::kernels {

namespace {

template <typename T>
MetricPrepareResult<Acc<T>> prepare(const T* x, std::int64_t n) {
  using R = MetricPrepareResult<Acc<T>>;
  const R identity = metric_identity<Acc<T>>();
  const auto combine = [](const R& a, const R& b) { return metric_combine(a, b); };
  const std::int64_t vector = kVector<T>;
  const std::int64_t vectors = ceil_div(n, vector);
  const std::int64_t blocks = reduction_blocks(n, sizeof(T));
  const std::int64_t stride = blocks * kThreads;
  std::vector<R> partials(static_cast<std::size_t>(blocks));
  R lanes[kThreads];
  for (std::int64_t b = 0; b < blocks; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      R p = identity;
      for (std::int64_t v = b * kThreads + t; v < vectors; v += stride) {
        const std::int64_t end = std::min(n, (v + 1) * vector);
        for (std::int64_t i = v * vector; i < end; ++i) metric_accumulate(p, widen(x[i]));
      }
      lanes[t] = p;
    }
    partials[static_cast<std::size_t>(b)] = block_tree(lanes, identity, combine);
  }
  for (int t = 0; t < kThreads; ++t) {
    R p = identity;
    for (std::int64_t i = t; i < blocks; i += kThreads)
      p = metric_combine(p, partials[static_cast<std::size_t>(i)]);
    lanes[t] = p;
  }
  return block_tree(lanes, identity, combine);
}

}  // namespace

MetricPrepareResult<float> metric_prepare_twin(const float* x, std::int64_t n) {
  return prepare(x, n);
}
MetricPrepareResult<float> metric_prepare_twin(const Bf16* x, std::int64_t n) {
  return prepare(x, n);
}
MetricPrepareResult<double> metric_prepare_twin(const double* x, std::int64_t n) {
  return prepare(x, n);
}

}  // namespace parity::kernels
