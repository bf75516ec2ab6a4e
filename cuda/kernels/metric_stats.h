#pragma once
// The one-read statistics of an observation (metric prepare) and their fold,
// shared by the kernel and its host twin. Semantics follow the reference
// metrics (harness/metrics/statistics/logical_metrics.cpp): values widen to the
// accumulation type (fp64 for fp64, fp32 otherwise) before any arithmetic; a
// NaN anywhere makes sum, sum of squares, min, max and abs-max NaN (ATen's
// max/min propagate NaN); +Inf and -Inf both present make the sums NaN; an empty
// tensor gives the reduction identities (0, 0, +Inf, -Inf, -Inf, 0, 0).
#include <cstddef>
#include <cstdint>

#include "cuda/kernels/host_device.h"
#include "cuda/kernels/reduction_order.h"

namespace parity::kernels {

template <typename Acc>
struct MetricPrepareResult {
  Acc sum_squares;
  Acc sum;
  Acc min;
  Acc max;
  Acc abs_max;
  std::int64_t nan_count;
  std::int64_t inf_count;
};

template <typename Acc>
PARITY_HD inline bool is_nan(Acc v) {
  return v != v;
}

// NaN-propagating max/min: the first NaN seen wins, else the ordinary extreme.
template <typename Acc>
PARITY_HD inline Acc max_nan(Acc a, Acc b) {
  return is_nan(a) ? a : is_nan(b) ? b : (b > a ? b : a);
}
template <typename Acc>
PARITY_HD inline Acc min_nan(Acc a, Acc b) {
  return is_nan(a) ? a : is_nan(b) ? b : (b < a ? b : a);
}

template <typename Acc>
PARITY_HD inline MetricPrepareResult<Acc> metric_identity() {
  const Acc inf = Acc(1) / Acc(0);
  return MetricPrepareResult<Acc>{Acc(0), Acc(0), inf, -inf, -inf, 0, 0};
}

// Fold one (widened) element. The product is rounded before the sum (the
// kernels compile with -fmad=false, the twins with -ffp-contract=off): no FMA,
// so the device and the host round alike.
template <typename Acc>
PARITY_HD inline void metric_accumulate(MetricPrepareResult<Acc>& r, Acc x) {
  const Acc square = x * x;
  r.sum_squares = r.sum_squares + square;
  r.sum = r.sum + x;
  r.min = min_nan(r.min, x);
  r.max = max_nan(r.max, x);
  r.abs_max = max_nan(r.abs_max, x < Acc(0) ? -x : (x == Acc(0) ? Acc(0) : x));  // |-0| = +0
  r.nan_count += is_nan(x) ? 1 : 0;
  r.inf_count += !is_nan(x) && is_nan(x - x) ? 1 : 0;  // x - x is NaN for NaN and +-Inf only
}

template <typename Acc>
PARITY_HD inline MetricPrepareResult<Acc> metric_combine(const MetricPrepareResult<Acc>& a,
                                                         const MetricPrepareResult<Acc>& b) {
  return MetricPrepareResult<Acc>{a.sum_squares + b.sum_squares, a.sum + b.sum,
                                  min_nan(a.min, b.min),         max_nan(a.max, b.max),
                                  max_nan(a.abs_max, b.abs_max), a.nan_count + b.nan_count,
                                  a.inf_count + b.inf_count};
}

// Bytes of device workspace (the block partials) metric prepare needs for n
// elements of `element_bytes` each.
template <typename Acc>
std::size_t metric_prepare_workspace_bytes(std::int64_t n, std::int64_t element_bytes) {
  return static_cast<std::size_t>(reduction_blocks(n, element_bytes)) *
         sizeof(MetricPrepareResult<Acc>);
}

}  // namespace parity::kernels
