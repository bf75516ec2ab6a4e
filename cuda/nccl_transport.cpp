// The only translation unit that includes ProcessGroupNCCL.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1  // pip torch's headers guard ProcessGroupNCCL with it
#endif
#include "cuda/nccl_transport.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "harness/parallel/c10_error_text.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/point_to_point.h"
#include "harness/parallel/rendezvous_store.h"

namespace parity::gpu {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceOp::max:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceOp::min:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

class NcclTransport final : public CollectiveTransport {
 public:
  NcclTransport(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                std::chrono::milliseconds timeout, std::string name)
      : rank_(rank), size_(size), timeout_(timeout), name_(std::move(name)) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
    } catch (const std::exception& e) {
      throw RendezvousError("cannot create NCCL group " + name_ + " (rank " + std::to_string(rank) +
                            " of " + std::to_string(size) + "): " + c10_error_text(e));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // NCCL reduces bf16 natively; parity's reductions are sums of few terms, so
  // the result rounds like the reference's fp32 wire within bf16 tolerance.
  at::Tensor all_reduce(const at::Tensor& input, ReduceOp op) override {
    std::vector<at::Tensor> tensors{input.clone().contiguous()};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.timeout = timeout_;
    wait("all_reduce", pg_->allreduce(tensors, opts));
    return tensors[0];
  }

  at::Tensor all_gather(const at::Tensor& input, std::int64_t dim) override {
    at::Tensor in = input.contiguous();
    std::vector<at::Tensor> inputs{in};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty_like(in));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    wait("all_gather", pg_->allgather(outputs, inputs, opts));
    return at::cat(outputs[0], dim);
  }

  at::Tensor reduce_scatter(const at::Tensor& input, std::int64_t dim, ReduceOp op) override {
    const std::int64_t chunk = input.size(dim) / size_;
    std::vector<std::vector<at::Tensor>> inputs(1);
    for (int r = 0; r < size_; ++r)
      inputs[0].push_back(input.narrow(dim, r * chunk, chunk).contiguous());
    std::vector<at::Tensor> outputs{at::empty_like(inputs[0][0])};
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.timeout = timeout_;
    wait("reduce_scatter", pg_->reduce_scatter(outputs, inputs, opts));
    return outputs[0];
  }

  at::Tensor broadcast(const at::Tensor& input, int root) override {
    std::vector<at::Tensor> tensors{input.clone().contiguous()};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = timeout_;
    wait("broadcast", pg_->broadcast(tensors, opts));
    return tensors[0];
  }

  void barrier() override {
    c10d::BarrierOptions opts;
    opts.timeout = timeout_;
    wait("barrier", pg_->barrier(opts));
  }

  // One coalesced group (ncclGroupStart/End underneath), as batch_isend_irecv
  // issues it: two neighbours that both send first would otherwise block each
  // other on the GPU.
  void exchange(std::vector<PointToPointTransfer>& transfers) override {
    std::vector<std::vector<at::Tensor>> holders;
    holders.reserve(transfers.size());
    pg_->startCoalescing();
    for (PointToPointTransfer& t : transfers) {
      holders.push_back({t.tensor});
      if (t.direction == PointToPointDirection::send) {
        pg_->send(holders.back(), t.peer, t.tag);
      } else {
        pg_->recv(holders.back(), t.peer, t.tag);
      }
    }
    wait("send/recv batch", pg_->endCoalescing());
  }

 private:
  // Work::wait on an NCCL work makes the current stream wait for the
  // collective (no host synchronization); a failure or the group's watchdog
  // timeout surfaces here or at the next call.
  void wait(const char* op, const c10::intrusive_ptr<c10d::Work>& work) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      throw CollectiveError("nccl " + std::string(op) + " on " + name_ +
                            " failed: " + c10_error_text(e));
    }
  }

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
};

}  // namespace

std::unique_ptr<CollectiveTransport> make_nccl_transport(const Rendezvous& rendezvous,
                                                         const std::string& group_name,
                                                         int rank_in_group, int group_size,
                                                         std::chrono::milliseconds timeout) {
  const auto& rs = rendezvous.store();
  auto prefixed =
      c10::make_intrusive<c10d::PrefixStore>(rs.group_prefix(group_name, rank_in_group), rs.store);
  return std::make_unique<NcclTransport>(std::move(prefixed), rank_in_group, group_size, timeout,
                                         group_name);
}

}  // namespace parity::gpu
