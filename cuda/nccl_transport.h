#pragma once
// c10d's ProcessGroupNCCL behind parity's CollectiveTransport, for groups whose
// members each own a GPU. Every call waits on the rank's current stream (no
// host synchronization), so it may run inside a CUDA graph capture.
#include <chrono>
#include <memory>
#include <string>

#include "harness/parallel/communicator.h"

namespace parity {
class Rendezvous;
}

namespace parity::gpu {

std::unique_ptr<CollectiveTransport> make_nccl_transport(const Rendezvous& rendezvous,
                                                         const std::string& group_name,
                                                         int rank_in_group, int group_size,
                                                         std::chrono::milliseconds timeout);

}  // namespace parity::gpu
