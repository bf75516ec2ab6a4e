#pragma once
// Transport "cuda": how the CUDA backend's groups move CUDA tensors.
//   NCCL  - when every member of the group runs on its own GPU (one rank per
//           GPU: torchrun / env launch with LOCAL_RANK); capturable, so
//           collectives may sit inside CUDA graphs (nccl_transport.h).
//   host  - otherwise (thread ranks sharing one GPU; one GPU cannot hold two
//           NCCL ranks): each collective copies its tensor to the host, runs
//           the reference's Gloo transport and copies the result back to the
//           device. The kernels of the sharded checks still run on the GPU.
//           A host copy cannot be captured: a collective called while this
//           thread captures a CUDA graph throws, naming the group and why.
// The members decide together: each writes "host/device" into the group's
// store prefix and reads the others', so all of them pick the same transport.
#include "harness/parallel/process_groups.h"

namespace parity::gpu {

class DeviceTransportFactory final : public TransportFactory {
 public:
  std::unique_ptr<CollectiveTransport> create(const Rendezvous& rendezvous,
                                              const std::string& group_name, int rank_in_group,
                                              int group_size,
                                              std::chrono::milliseconds timeout) override;
};

// A transport that moves the tensors of `host` (a CPU transport) to and from
// `device`: what the host path above uses, exposed for its test.
std::unique_ptr<CollectiveTransport> make_host_staged_transport(
    std::unique_ptr<CollectiveTransport> host, std::string group_name);

}  // namespace parity::gpu
