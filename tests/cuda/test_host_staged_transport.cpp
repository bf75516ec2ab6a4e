// The host path of transport "cuda" (cuda/device_transport.h): every collective
// is the wrapped host transport's, and results come back on the input's
// device. Runs on the CPU (CPU tensors pass through the same code; the
// capture check applies to CUDA tensors only).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "cuda/device_transport.h"

namespace parity::gpu {
namespace {

// A group of two whose other member holds `peer`: sums, gathers, chunks.
class PairTransport final : public CollectiveTransport {
 public:
  explicit PairTransport(at::Tensor peer) : peer_(std::move(peer)) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  at::Tensor all_reduce(const at::Tensor& x, ReduceOp) override {
    seen_cpu = seen_cpu && x.is_cpu();
    return x + peer_;
  }
  at::Tensor all_gather(const at::Tensor& x, std::int64_t dim) override {
    seen_cpu = seen_cpu && x.is_cpu();
    return at::cat({x, peer_}, dim);
  }
  at::Tensor reduce_scatter(const at::Tensor& x, std::int64_t dim, ReduceOp) override {
    seen_cpu = seen_cpu && x.is_cpu();
    return (x + at::cat({peer_, peer_}, dim)).chunk(2, dim)[0];
  }
  at::Tensor broadcast(const at::Tensor& x, int root) override { return root == 0 ? x : peer_; }
  void barrier() override { ++barriers; }
  bool seen_cpu = true;
  int barriers = 0;

 private:
  at::Tensor peer_;
};

TEST(HostStagedTransport, ForwardsEveryCollectiveThroughTheHostTransport) {
  const at::Tensor mine = at::arange(4, at::kDouble), peer = at::full({4}, 10.0, at::kDouble);
  auto owned = std::make_unique<PairTransport>(peer);
  PairTransport* pair = owned.get();
  auto t = make_host_staged_transport(std::move(owned), "tp group [0, 1]");
  EXPECT_EQ(t->size(), 2);
  EXPECT_TRUE(at::equal(t->all_reduce(mine, ReduceOp::sum), mine + peer));
  EXPECT_TRUE(at::equal(t->all_gather(mine, 0), at::cat({mine, peer})));
  EXPECT_TRUE(at::equal(t->broadcast(mine, 1), peer));
  t->barrier();
  EXPECT_EQ(pair->barriers, 1);
  EXPECT_TRUE(pair->seen_cpu);
}

}  // namespace
}  // namespace parity::gpu
