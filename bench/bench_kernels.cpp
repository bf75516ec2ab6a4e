// Fused metric prepare (cuda/kernels/metric_prepare.h: one read for sum of
// squares, sum, min, max, abs-max, NaN and Inf counts) against the same
// statistics with unfused ATen ops (as the reference metrics compute them), on
// 256 MiB and 1 GiB tensors in bf16 and fp32 (docs/benchmarks.md, "Fused
// kernels"; targets: >= 85 % of copy bandwidth, >= 3x ATen).
// A program, not a timed test; ci/gpu-validate-style runs on a GPU machine.
//
//   parity_bench_kernels [--iters N] [--mib M ...]
//
// Bandwidth counts the bytes each variant must move at least: the tensor once
// for prepare (ATen's unfused ops read it several times, which is the point),
// read + write for the device-to-device copy. Median of N timed runs (CUDA
// events on the current stream) after 3 warm-up runs. Without a GPU it exits 2.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/kernels/metric_prepare.h"

namespace {

using parity::kernels::MetricPrepareResult;

// Median milliseconds of `iters` runs of `work` on `stream`.
double median_ms(const std::function<void()>& work, int iters, cudaStream_t stream) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) work();
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, stream);
    work();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The reference metrics' statistics, one ATen op (or two) each.
void unfused_statistics(const at::Tensor& x) {
  const at::Tensor a = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
  (void)(a * a).sum();
  (void)a.sum();
  (void)a.min();
  (void)a.max();
  (void)a.abs().max();
  (void)a.isnan().sum();
  (void)a.isinf().sum();
}

void fused_statistics(const at::Tensor& x, at::Tensor& out, at::Tensor& workspace,
                      cudaStream_t stream) {
  const std::int64_t n = x.numel();
  auto* result = static_cast<MetricPrepareResult<float>*>(out.data_ptr());
  const cudaError_t e =
      x.scalar_type() == at::kBFloat16
          ? parity::kernels::launch_metric_prepare(static_cast<const __nv_bfloat16*>(x.data_ptr()),
                                                   n, result, workspace.data_ptr(), stream)
          : parity::kernels::launch_metric_prepare(x.data_ptr<float>(), n, result,
                                                   workspace.data_ptr(), stream);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "launch_metric_prepare: %s\n", cudaGetErrorString(e));
    std::exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::vector<std::int64_t> mib;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--mib") && i + 1 < argc) {
      mib.push_back(std::atoll(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: parity_bench_kernels [--iters N] [--mib M ...]\n");
      return 2;
    }
  }
  if (mib.empty()) mib = {256, 1024};
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "parity_bench_kernels: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s\n\n", prop.name);
  std::printf(
      "| dtype | size | copy GB/s | fused GB/s | fused %% of copy | ATen GB/s | ATen %% of copy | "
      "fused vs ATen |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const std::int64_t m : mib) {
      const std::int64_t bytes = m << 20;
      const std::int64_t n = bytes / static_cast<std::int64_t>(at::elementSize(dtype));
      const auto options = at::TensorOptions().device(at::kCUDA).dtype(dtype);
      const at::Tensor x = at::randn({n}, options);
      at::Tensor copy = at::empty_like(x);
      at::Tensor out = at::empty({static_cast<std::int64_t>(sizeof(MetricPrepareResult<float>))},
                                 options.dtype(at::kByte));
      at::Tensor workspace = at::empty(
          {std::max<std::int64_t>(
              1, static_cast<std::int64_t>(
                     parity::kernels::metric_prepare_workspace_bytes<float>(n, x.element_size())))},
          options.dtype(at::kByte));
      const double copy_ms = median_ms([&] { copy.copy_(x); }, iters, stream);
      const double fused_ms =
          median_ms([&] { fused_statistics(x, out, workspace, stream); }, iters, stream);
      const double aten_ms = median_ms([&] { unfused_statistics(x); }, iters, stream);
      const double copy_gbs = 2.0 * bytes / (copy_ms * 1e6);
      const double fused_gbs = bytes / (fused_ms * 1e6), aten_gbs = bytes / (aten_ms * 1e6);
      std::printf("| %s | %lld MiB | %.0f | %.0f | %.1f %% | %.0f | %.1f %% | %.2fx |\n",
                  dtype == at::kBFloat16 ? "bf16" : "fp32", static_cast<long long>(m), copy_gbs,
                  fused_gbs, 100.0 * fused_gbs / copy_gbs, aten_gbs, 100.0 * aten_gbs / copy_gbs,
                  aten_ms / fused_ms);
    }
  }
  return 0;
}
