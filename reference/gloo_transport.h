#pragma once
// The reference backend's data movement: c10d::ProcessGroupGloo over TCP
// loopback, one process group per parity group, each on its own key prefix of
// the run's store. Registered as transport "gloo" (see gloo_transport.cpp).
//
// Gloo workarounds (LibTorch 1.13's Gloo; see docs/runtime-collectives.md):
// - reduce_scatter is all_reduce then this rank's chunk along `dim` (Gloo has
//   no reduce_scatter); the native call is used only where
//   compat::kGlooHasReduceScatter says so.
// - bfloat16 and float16 tensors travel as float32 and are converted back, so
//   a reduction rounds once, at the end (identical on every LibTorch version).
// - every wait is bounded by the group's timeout; a timeout throws
//   CollectiveTimeout naming the op and the timeout.
#include <chrono>
#include <memory>
#include <string>

#include "harness/parallel/communicator.h"
#include "harness/parallel/process_groups.h"

namespace parity {
class Rendezvous;
}

namespace parity::reference {

// One group's transport. Blocks until all `group_size` members have called it
// with the same `group_name` on the same rendezvous (or throws
// CollectiveTimeout / RendezvousError after `timeout`).
std::unique_ptr<CollectiveTransport> make_gloo_transport(const Rendezvous& rendezvous,
                                                         const std::string& group_name,
                                                         int rank_in_group, int group_size,
                                                         std::chrono::milliseconds timeout);

class GlooTransportFactory : public TransportFactory {
 public:
  std::unique_ptr<CollectiveTransport> create(const Rendezvous& rendezvous,
                                              const std::string& group_name, int rank_in_group,
                                              int group_size,
                                              std::chrono::milliseconds timeout) override {
    return make_gloo_transport(rendezvous, group_name, rank_in_group, group_size, timeout);
  }
};

}  // namespace parity::reference
