#pragma once
// Host twin of launch_metric_prepare (metric_prepare.h): the same statistics
// folded in the kernel's order (reduction_order.h), on the CPU, bit for bit.
// x: n contiguous elements (a strided tensor is copied contiguous first).
#include <cstdint>

#include "cuda/kernels/bf16.h"
#include "cuda/kernels/metric_stats.h"

namespace parity::kernels {

MetricPrepareResult<float> metric_prepare_twin(const float* x, std::int64_t n);
MetricPrepareResult<float> metric_prepare_twin(const Bf16* x, std::int64_t n);
MetricPrepareResult<double> metric_prepare_twin(const double* x, std::int64_t n);

}  // namespace parity::kernels
