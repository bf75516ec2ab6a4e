#include "cuda/device_transport.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstdio>
#include <set>

#include "cuda/cuda_device.h"
#include "cuda/nccl_transport.h"
#include "harness/parallel/c10_error_text.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/point_to_point.h"
#include "harness/parallel/rendezvous_store.h"
#include "reference/gloo_transport.h"

namespace parity::gpu {
namespace {

class HostStagedTransport final : public CollectiveTransport {
 public:
  HostStagedTransport(std::unique_ptr<CollectiveTransport> host, std::string name)
      : host_(std::move(host)), name_(std::move(name)) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  at::Tensor all_reduce(const at::Tensor& input, ReduceOp op) override {
    refuse_under_capture("all_reduce", input);
    return host_->all_reduce(input.to(at::kCPU), op).to(input.device());
  }
  at::Tensor all_gather(const at::Tensor& input, std::int64_t dim) override {
    refuse_under_capture("all_gather", input);
    return host_->all_gather(input.to(at::kCPU), dim).to(input.device());
  }
  at::Tensor reduce_scatter(const at::Tensor& input, std::int64_t dim, ReduceOp op) override {
    refuse_under_capture("reduce_scatter", input);
    return host_->reduce_scatter(input.to(at::kCPU), dim, op).to(input.device());
  }
  at::Tensor broadcast(const at::Tensor& input, int root) override {
    refuse_under_capture("broadcast", input);
    return host_->broadcast(input.to(at::kCPU), root).to(input.device());
  }
  void barrier() override { host_->barrier(); }
  void exchange(std::vector<PointToPointTransfer>& transfers) override {
    std::vector<PointToPointTransfer> host;
    for (const PointToPointTransfer& t : transfers) {
      refuse_under_capture("send/recv", t.tensor);
      host.push_back({t.direction, t.peer, t.tensor.to(at::kCPU).contiguous(), t.tag});
    }
    host_->exchange(host);
    for (std::size_t i = 0; i < transfers.size(); ++i)
      if (transfers[i].direction == PointToPointDirection::recv)
        transfers[i].tensor.copy_(host[i].tensor);
  }

 private:
  // A copy to the host inside a stream capture would invalidate the capture
  // with an error that names neither the group nor the cause.
  void refuse_under_capture(const char* op, const at::Tensor& input) const {
    if (!input.is_cuda() ||
        c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None)
      return;
    throw CollectiveError(std::string(op) + " on " + name_ +
                          " inside a captured CUDA graph: this group's ranks share a GPU, so "
                          "its collectives go through the host and cannot be captured (run one "
                          "rank per GPU for NCCL, or use --graphs none, or a layout whose "
                          "graphed layers have no collective: tp = cp = 1)");
  }

  std::unique_ptr<CollectiveTransport> host_;
  std::string name_;
};

// "hostname/GPU-uuid": equal for two ranks exactly when they share a GPU,
// whatever CUDA_VISIBLE_DEVICES renumbered.
std::string device_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(rank_device_index());
  std::string id = std::string(host) + "/";
  for (unsigned char b : prop->uuid.bytes) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", b);
    id += hex;
  }
  return id;
}

// Whether every member of the group owns its GPU (the members' answers agree:
// each reads all identities).
bool one_gpu_per_member(const Rendezvous& rendezvous, const std::string& group_name, int rank,
                        int size, std::chrono::milliseconds timeout) {
  const auto& rs = rendezvous.store();
  auto store = c10::make_intrusive<c10d::PrefixStore>(rs.group_prefix(group_name, rank) + "device/",
                                                      rs.store);
  const std::string mine = device_identity();
  try {
    store->set(std::to_string(rank), std::vector<std::uint8_t>(mine.begin(), mine.end()));
    std::set<std::string> seen;
    for (int r = 0; r < size; ++r) {
      store->wait({std::to_string(r)}, timeout);
      const std::vector<std::uint8_t> v = store->get(std::to_string(r));
      seen.insert(std::string(v.begin(), v.end()));
    }
    return static_cast<int>(seen.size()) == size;
  } catch (const std::exception& e) {
    throw RendezvousError("cannot agree on the transport of group " + group_name + " (rank " +
                          std::to_string(rank) + " of " + std::to_string(size) + ", timeout " +
                          std::to_string(timeout.count()) + " ms): " + c10_error_text(e));
  }
}

const bool kRegistered = [] {
  register_transport_factory("cuda", [] { return std::make_unique<DeviceTransportFactory>(); });
  return true;
}();

}  // namespace

std::unique_ptr<CollectiveTransport> make_host_staged_transport(
    std::unique_ptr<CollectiveTransport> host, std::string group_name) {
  return std::make_unique<HostStagedTransport>(std::move(host), std::move(group_name));
}

std::unique_ptr<CollectiveTransport> DeviceTransportFactory::create(
    const Rendezvous& rendezvous, const std::string& group_name, int rank_in_group, int group_size,
    std::chrono::milliseconds timeout) {
  if (one_gpu_per_member(rendezvous, group_name, rank_in_group, group_size, timeout))
    return make_nccl_transport(rendezvous, group_name, rank_in_group, group_size, timeout);
  return make_host_staged_transport(
      reference::make_gloo_transport(rendezvous, group_name, rank_in_group, group_size, timeout),
      group_name);
}

}  // namespace parity::gpu
