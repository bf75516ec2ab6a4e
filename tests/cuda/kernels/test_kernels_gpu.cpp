// The kernels of cuda/kernels/ against their host twins, bit for bit (NaN
// matching NaN: the device may canonicalize a NaN's payload). Plain CUDA
// runtime, no LibTorch. Without a CUDA device every test skips with the reason.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels/bias_dropout_add.h"
#include "cuda/kernels/bias_dropout_add_twin.h"
#include "cuda/kernels/dimwise_sums.h"
#include "cuda/kernels/dimwise_sums_twin.h"
#include "cuda/kernels/metric_prepare.h"
#include "cuda/kernels/metric_prepare_batch.h"
#include "cuda/kernels/metric_prepare_twin.h"
#include "cuda/kernels/widen.h"

namespace parity::kernels {
namespace {

#define PARITY_REQUIRE_CUDA_DEVICE()                                                   \
  do {                                                                                 \
    int devices = 0;                                                                   \
    const cudaError_t e = cudaGetDeviceCount(&devices);                                \
    if (e != cudaSuccess || devices == 0)                                              \
      GTEST_SKIP() << "no CUDA device ("                                               \
                   << (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") << ")"; \
  } while (0)

#define PARITY_CUDA_OK(call) ASSERT_EQ(cudaSuccess, (call)) << #call

// Device memory for `count` values of T, freed with the object.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t count) {
    if (cudaMalloc(&ptr_, std::max<std::size_t>(count, 1) * sizeof(T)) != cudaSuccess)
      ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// The device type of a host element type: the same 16 bits for bf16.
template <typename H>
struct DeviceOf {
  using type = H;
};
template <>
struct DeviceOf<Bf16> {
  using type = __nv_bfloat16;
};
template <typename H>
using Dev = typename DeviceOf<H>::type;

template <typename H>
H from_double(double v) {
  if constexpr (std::is_same_v<H, Bf16>)
    return float_to_bf16(static_cast<float>(v));
  else
    return static_cast<H>(v);
}

// n normal values, with about 1 in 97 NaN, +Inf or -Inf when `specials`.
template <typename H>
std::vector<H> random_values(std::size_t n, unsigned seed, bool specials) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.25, 1.0);
  std::uniform_int_distribution<int> pick(0, 96);
  std::vector<H> v(n);
  for (H& x : v) {
    const int k = specials ? pick(rng) : 3;
    x = from_double<H>(k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY : normal(rng));
  }
  return v;
}

template <typename V>
bool same_bits(V a, V b) {
  if constexpr (std::is_floating_point_v<V>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  }
  return std::memcmp(&a, &b, sizeof a) == 0;
}
bool same_bits(Bf16 a, Bf16 b) { return same_bits(bf16_to_float(a), bf16_to_float(b)); }

template <typename H>
::testing::AssertionResult same_vectors(const std::vector<H>& got, const std::vector<H>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!same_bits(got[i], want[i]))
      return ::testing::AssertionFailure() << "first difference at " << i << " of " << want.size();
  return ::testing::AssertionSuccess();
}

template <typename H>
std::vector<H> download(const H* device, std::size_t n) {
  std::vector<H> host(n);
  if (n) cudaMemcpy(host.data(), device, n * sizeof(H), cudaMemcpyDeviceToHost);
  return host;
}

template <typename H>
void upload(DeviceBuffer<H>& device, const std::vector<H>& host) {
  if (!host.empty())
    cudaMemcpy(device.get(), host.data(), host.size() * sizeof(H), cudaMemcpyHostToDevice);
}

template <typename H>
void check_prepare(std::size_t n, bool specials, std::size_t misalign) {
  using R = MetricPrepareResult<Acc<H>>;
  const std::vector<H> host = random_values<H>(n + misalign, static_cast<unsigned>(n), specials);
  DeviceBuffer<H> x(host.size());
  upload(x, host);
  DeviceBuffer<R> out(1);
  DeviceBuffer<unsigned char> workspace(metric_prepare_workspace_bytes<Acc<H>>(n, sizeof(H)));
  const auto* xd = reinterpret_cast<const Dev<H>*>(x.get() + misalign);
  PARITY_CUDA_OK(
      launch_metric_prepare(xd, static_cast<std::int64_t>(n), out.get(), workspace.get(), nullptr));
  PARITY_CUDA_OK(cudaDeviceSynchronize());
  const R got = download(out.get(), 1)[0];
  const R want = metric_prepare_twin(host.data() + misalign, static_cast<std::int64_t>(n));
  const std::string what =
      "n=" + std::to_string(n) + (specials ? " NaN/Inf" : "") + (misalign ? " misaligned" : "");
  EXPECT_TRUE(same_bits(got.sum_squares, want.sum_squares)) << what;
  EXPECT_TRUE(same_bits(got.sum, want.sum)) << what;
  EXPECT_TRUE(same_bits(got.min, want.min)) << what;
  EXPECT_TRUE(same_bits(got.max, want.max)) << what;
  EXPECT_TRUE(same_bits(got.abs_max, want.abs_max)) << what;
  EXPECT_EQ(got.nan_count, want.nan_count) << what;
  EXPECT_EQ(got.inf_count, want.inf_count) << what;
}

// A batch (empty items, uneven sizes, misaligned starts: the items lie back to
// back in one buffer) gives each item its single launch's bits, i.e. its twin's.
template <typename H>
void check_batch(bool specials) {
  using R = MetricPrepareResult<Acc<H>>;
  using Item = MetricPrepareItem<Dev<H>, Acc<H>>;
  const std::vector<std::int64_t> ns = {0, 1000, 0, 33, 65537, 1, (1 << 20) + 3, 0, 7};
  std::vector<std::int64_t> offsets, first_block(ns.size());
  std::int64_t total = 0;
  for (const std::int64_t n : ns) {
    offsets.push_back(total);
    total += n;
  }
  const std::vector<H> host = random_values<H>(static_cast<std::size_t>(total), 5, specials);
  DeviceBuffer<H> x(host.size());
  upload(x, host);
  const int count = static_cast<int>(ns.size());
  const std::int64_t blocks = batch_first_blocks(ns.data(), count, sizeof(H), first_block.data());
  DeviceBuffer<R> out(ns.size());
  std::vector<Item> items;
  for (int k = 0; k < count; ++k)
    items.push_back(Item{reinterpret_cast<const Dev<H>*>(x.get() + offsets[k]), ns[k],
                         out.get() + k, first_block[k]});
  DeviceBuffer<Item> items_device(items.size());
  upload(items_device, items);
  DeviceBuffer<R> workspace(static_cast<std::size_t>(blocks));
  PARITY_CUDA_OK(
      launch_metric_prepare_batch(items_device.get(), count, blocks, workspace.get(), nullptr));
  PARITY_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<R> got = download(out.get(), ns.size());
  for (int k = 0; k < count; ++k) {
    const R want = metric_prepare_twin(host.data() + offsets[k], ns[k]);
    const std::string what = "item " + std::to_string(k) + " n=" + std::to_string(ns[k]);
    EXPECT_TRUE(same_bits(got[k].sum_squares, want.sum_squares)) << what;
    EXPECT_TRUE(same_bits(got[k].sum, want.sum)) << what;
    EXPECT_TRUE(same_bits(got[k].min, want.min)) << what;
    EXPECT_TRUE(same_bits(got[k].max, want.max)) << what;
    EXPECT_TRUE(same_bits(got[k].abs_max, want.abs_max)) << what;
    EXPECT_EQ(got[k].nan_count, want.nan_count) << what;
    EXPECT_EQ(got[k].inf_count, want.inf_count) << what;
  }
}

template <typename H>
void check_dimwise(std::int64_t rows, std::int64_t cols, bool specials) {
  const auto n = static_cast<std::size_t>(rows * cols);
  const std::vector<H> host = random_values<H>(n, static_cast<unsigned>(rows + cols), specials);
  DeviceBuffer<H> x(n);
  upload(x, host);
  const auto* xd = reinterpret_cast<const Dev<H>*>(x.get());
  DeviceBuffer<Acc<H>> row_out(static_cast<std::size_t>(rows)),
      col_out(static_cast<std::size_t>(cols));
  DeviceBuffer<unsigned char> workspace(column_sums_workspace_bytes<Acc<H>>(rows, cols));
  PARITY_CUDA_OK(launch_row_sums_of_squares(xd, rows, cols, row_out.get(), nullptr));
  PARITY_CUDA_OK(
      launch_column_sums_of_squares(xd, rows, cols, col_out.get(), workspace.get(), nullptr));
  PARITY_CUDA_OK(cudaDeviceSynchronize());
  std::vector<Acc<H>> want_rows(static_cast<std::size_t>(rows)),
      want_cols(static_cast<std::size_t>(cols));
  row_sums_of_squares_twin(host.data(), rows, cols, want_rows.data());
  column_sums_of_squares_twin(host.data(), rows, cols, want_cols.data());
  const std::string what = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  EXPECT_TRUE(same_vectors(download(row_out.get(), want_rows.size()), want_rows))
      << what << " rows";
  EXPECT_TRUE(same_vectors(download(col_out.get(), want_cols.size()), want_cols))
      << what << " columns";
}

template <typename H>
void check_dropout(std::int64_t rows, std::int64_t cols, float p, bool with_bias) {
  const auto n = static_cast<std::size_t>(rows * cols);
  const DropoutKey key{0xfeedbeefcafe0001ull, static_cast<std::uint64_t>(rows)};
  const std::vector<H> x = random_values<H>(n, 1, true), r = random_values<H>(n, 2, false);
  const std::vector<H> b = random_values<H>(static_cast<std::size_t>(cols), 3, false);
  DeviceBuffer<H> xd(n), rd(n), bd(static_cast<std::size_t>(cols)), yd(n), gd(n);
  upload(xd, x);
  upload(rd, r);
  upload(bd, b);
  const auto dev = [](const DeviceBuffer<H>& d) { return reinterpret_cast<Dev<H>*>(d.get()); };
  const auto n64 = static_cast<std::int64_t>(n);
  PARITY_CUDA_OK(launch_bias_dropout_add(dev(xd), with_bias ? dev(bd) : nullptr, dev(rd), dev(yd),
                                         n64, cols, p, key, nullptr));
  PARITY_CUDA_OK(launch_bias_dropout_add_backward(dev(xd), dev(gd), n64, p, key, nullptr));
  PARITY_CUDA_OK(cudaDeviceSynchronize());
  std::vector<H> y(n), g(n);
  bias_dropout_add_twin(x.data(), with_bias ? b.data() : nullptr, r.data(), y.data(), n64, cols, p,
                        key);
  bias_dropout_add_backward_twin(x.data(), g.data(), n64, p, key);
  const std::string what = "[" + std::to_string(rows) + ", " + std::to_string(cols) +
                           "] p=" + std::to_string(p) + (with_bias ? " bias" : "");
  EXPECT_TRUE(same_vectors(download(yd.get(), n), y)) << what << " forward";
  EXPECT_TRUE(same_vectors(download(gd.get(), n), g)) << what << " backward";
}

template <typename H>
class KernelsVsTwins : public ::testing::Test {};
using HostTypes = ::testing::Types<float, Bf16, double>;
TYPED_TEST_SUITE(KernelsVsTwins, HostTypes);

TYPED_TEST(KernelsVsTwins, MetricPrepareBitForBit) {
  PARITY_REQUIRE_CUDA_DEVICE();
  for (const std::size_t n : {0, 1, 7, 31, 33, 1000, 65537, 1 << 22, (1 << 26) + 5})
    for (const bool specials : {false, true})
      for (const std::size_t misalign : {0, 1}) check_prepare<TypeParam>(n, specials, misalign);
}

TYPED_TEST(KernelsVsTwins, BatchedMetricPrepareBitForBit) {
  PARITY_REQUIRE_CUDA_DEVICE();
  for (const bool specials : {false, true}) check_batch<TypeParam>(specials);
}

TYPED_TEST(KernelsVsTwins, RowAndColumnSumsBitForBit) {
  PARITY_REQUIRE_CUDA_DEVICE();
  for (const auto& [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, 5}, {5, 0}, {1, 1}, {3, 31}, {33, 1000}, {1000, 33}, {4096, 1024}, {70000, 1}})
    for (const bool specials : {false, true}) check_dimwise<TypeParam>(rows, cols, specials);
}

TYPED_TEST(KernelsVsTwins, BiasDropoutAddBitForBit) {
  PARITY_REQUIRE_CUDA_DEVICE();
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 8}, {1, 1}, {3, 33}, {2048, 1031}})
    for (const float p : {0.0f, 0.1f, 0.5f})
      for (const bool with_bias : {false, true}) check_dropout<TypeParam>(rows, cols, p, with_bias);
}

}  // namespace
}  // namespace parity::kernels
