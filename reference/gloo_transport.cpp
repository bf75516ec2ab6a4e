// The Gloo transport (see gloo_transport.h). The only translation unit of the
// reference backend that includes ProcessGroupGloo.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1  // Debian's and pip's headers guard ProcessGroupGloo with it
#endif
#include "reference/gloo_transport.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <mutex>

#include "harness/base/check.h"
#include "harness/compat/torch_compat.h"
#include "harness/parallel/c10_error_text.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/point_to_point.h"
#include "harness/parallel/rendezvous_store.h"

namespace parity::reference {

namespace {

bool looks_like_timeout(const std::string& m) {
  for (const char* needle : {"timed out", "Timed out", "Timeout", "timeout"})
    if (m.find(needle) != std::string::npos) return true;
  return false;
}

// One Gloo TCP device per process, bound to loopback on an ephemeral port and
// shared by every group (a device multiplexes any number of pairs): 16 thread
// ranks x 4 groups would otherwise start 64 listeners and 64 event loops.
std::shared_ptr<::gloo::transport::Device> loopback_device() {
  static std::mutex mutex;
  static std::shared_ptr<::gloo::transport::Device> device;
  std::lock_guard<std::mutex> lock(mutex);
  if (!device) device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return device;
}

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

// Gloo (1.13) has no bf16; fp16 sums would round at every step. Both travel
// as fp32. Returns a new tensor the transport may write into.
bool widened(c10::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }
at::Tensor wire_copy(const at::Tensor& x) {
  return widened(x.scalar_type()) ? x.to(at::kFloat).contiguous() : x.clone().contiguous();
}
at::Tensor from_wire(const at::Tensor& y, c10::ScalarType original) {
  return y.scalar_type() == original ? y : y.to(original);
}

class GlooTransport final : public CollectiveTransport {
 public:
  GlooTransport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                std::chrono::milliseconds timeout, std::string name)
      : rank_(rank), size_(size), timeout_(timeout), name_(std::move(name)) {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->threads = 1;  // one worker per group: many groups share 2 cores
    options->devices.push_back(loopback_device());
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
    } catch (const std::exception& e) {
      // Connecting the group is part of the rendezvous: a member that never
      // comes shows up here as a store or connect timeout.
      throw RendezvousError("cannot create Gloo group " + name_ + " (rank " + std::to_string(rank) +
                            " of " + std::to_string(size) + ", timeout " +
                            std::to_string(timeout.count()) + " ms): " + c10_error_text(e));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  at::Tensor all_reduce(const at::Tensor& input, ReduceOp op) override {
    std::vector<at::Tensor> tensors{wire_copy(input)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.timeout = timeout_;
    wait("all_reduce", [&] { return pg_->allreduce(tensors, opts); });
    return from_wire(tensors[0], input.scalar_type());
  }

  at::Tensor all_gather(const at::Tensor& input, std::int64_t dim) override {
    std::vector<at::Tensor> inputs{wire_copy(input)};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(at::empty_like(inputs[0]));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    wait("all_gather", [&] { return pg_->allgather(outputs, inputs, opts); });
    return from_wire(at::cat(outputs[0], dim), input.scalar_type());
  }

  at::Tensor reduce_scatter(const at::Tensor& input, std::int64_t dim, ReduceOp op) override {
    const std::int64_t chunk = input.size(dim) / size_;
    if constexpr (compat::kGlooHasReduceScatter) {
      at::Tensor wire = wire_copy(input);
      std::vector<std::vector<at::Tensor>> inputs(1);
      for (int r = 0; r < size_; ++r)
        inputs[0].push_back(wire.narrow(dim, r * chunk, chunk).contiguous());
      std::vector<at::Tensor> outputs{at::empty_like(inputs[0][0])};
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = to_c10d(op);
      opts.timeout = timeout_;
      wait("reduce_scatter", [&] { return pg_->reduce_scatter(outputs, inputs, opts); });
      return from_wire(outputs[0], input.scalar_type());
    }
    // Portable path: every rank reduces the whole tensor and keeps its chunk.
    // Costs size_ times the traffic of a real reduce-scatter; same values.
    std::vector<at::Tensor> tensors{wire_copy(input)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.timeout = timeout_;
    wait("reduce_scatter (all_reduce + chunk)", [&] { return pg_->allreduce(tensors, opts); });
    return from_wire(tensors[0].narrow(dim, rank_ * chunk, chunk).clone(), input.scalar_type());
  }

  at::Tensor broadcast(const at::Tensor& input, int root) override {
    std::vector<at::Tensor> tensors{wire_copy(input)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = timeout_;
    wait("broadcast", [&] { return pg_->broadcast(tensors, opts); });
    return from_wire(tensors[0], input.scalar_type());
  }

  // Native: ProcessGroupGloo's alltoall_base with empty split lists is the
  // equal-chunk exchange along dim 0 (1/size of the default's traffic).
  at::Tensor all_to_all(const at::Tensor& input) override {
    at::Tensor wire = wire_copy(input);
    at::Tensor output = at::empty_like(wire);
    std::vector<std::int64_t> equal_splits;
    c10d::AllToAllOptions opts;
    opts.timeout = timeout_;
    wait("all_to_all",
         [&] { return pg_->alltoall_base(output, wire, equal_splits, equal_splits, opts); });
    return from_wire(output, input.scalar_type());
  }

  void barrier() override {
    c10d::BarrierOptions opts;
    opts.timeout = timeout_;
    wait("barrier", [&] { return pg_->barrier(opts); });
  }

  // Gloo's send and recv move raw bytes (any dtype, no widening) and start at
  // once; every op of the batch is started before the first wait.
  void exchange(std::vector<PointToPointTransfer>& transfers) override {
    std::vector<std::vector<at::Tensor>> holders;  // alive until every wait returned
    holders.reserve(transfers.size());
    using Work = decltype(pg_->barrier());
    std::vector<Work> works;
    const char* op = transfers.size() == 1
                         ? (transfers[0].direction == PointToPointDirection::send ? "send" : "recv")
                         : "send/recv batch";
    wait(op, [&] {
      for (PointToPointTransfer& t : transfers) {
        holders.push_back({t.tensor});
        works.push_back(t.direction == PointToPointDirection::send
                            ? pg_->send(holders.back(), t.peer, t.tag)
                            : pg_->recv(holders.back(), t.peer, t.tag));
      }
      // wait() waits on what this returns; the others are waited for first.
      for (std::size_t i = 0; i + 1 < works.size(); ++i) works[i]->wait(timeout_);
      return works.back();
    });
  }

 private:
  // Starts the op and waits at most the timeout for it. Gloo's own timeout
  // (the same value, in the context) ends the op on its worker thread too.
  template <typename Start>
  void wait(const char* op, Start&& start) {
    try {
      auto work = start();
      work->wait(timeout_);
    } catch (const std::exception& e) {
      const std::string m = c10_error_text(e);
      if (looks_like_timeout(m)) {
        // Work::wait's own "Operation timed out!" adds nothing; Gloo's says which peer.
        const std::string detail = m == "Operation timed out!" ? "" : ": " + m;
        throw CollectiveTimeout("gloo " + std::string(op) + " on " + name_ + " timed out after " +
                                std::to_string(timeout_.count()) + " ms" + detail);
      }
      throw CollectiveError("gloo " + std::string(op) + " on " + name_ + " failed: " + m);
    }
  }

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

const bool kRegistered = [] {
  compat::disable_flight_recorder_unless_set();  // before any ProcessGroupGloo exists
  register_transport_factory("gloo", [] { return std::make_unique<GlooTransportFactory>(); });
  return true;
}();

}  // namespace

std::unique_ptr<CollectiveTransport> make_gloo_transport(const Rendezvous& rendezvous,
                                                         const std::string& group_name,
                                                         int rank_in_group, int group_size,
                                                         std::chrono::milliseconds timeout) {
  if (group_size < 1 || rank_in_group < 0 || rank_in_group >= group_size)
    PARITY_FAIL("gloo transport: rank " + std::to_string(rank_in_group) + " of a group of " +
                std::to_string(group_size));
  const auto& rs = rendezvous.store();
  auto prefixed =
      c10::make_intrusive<c10d::PrefixStore>(rs.group_prefix(group_name, rank_in_group), rs.store);
  return std::make_unique<GlooTransport>(std::move(prefixed), rank_in_group, group_size, timeout,
                                         group_name);
}

}  // namespace parity::reference
