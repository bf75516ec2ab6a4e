#pragma once
// Builds, for one rank, a communicator per axis (tp, cp, dp), the expert-parallel
// group (ep; with an expert TP size of its own also etp and edp), the pipeline
// group (pp: point-to-point between stages) and the world group, over a transport chosen by name
// ("gloo" for the reference backend).
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "harness/parallel/communicator.h"
#include "harness/parallel/topology.h"

namespace parity {

class Rendezvous;

// Makes the data-movement half of one group. Backends register one by name.
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  // `group_name` is unique per group in the run (store key prefix).
  virtual std::unique_ptr<CollectiveTransport> create(const Rendezvous& rendezvous,
                                                      const std::string& group_name,
                                                      int rank_in_group, int group_size,
                                                      std::chrono::milliseconds timeout) = 0;
};

void register_transport_factory(const std::string& name,
                                std::function<std::unique_ptr<TransportFactory>()> make);
// Throws std::invalid_argument naming the known transports when `name` is unknown.
std::unique_ptr<TransportFactory> make_transport_factory(const std::string& name);

struct RankGroups {
  // Every member is a communicator, a group of one where the axis has size 1
  // (ep and pp included); ep and pp may be null only in groups a test
  // assembles by hand. etp and edp exist only when the experts have a TP size
  // of their own (etp != tp); get(Axis::etp) is then the tp group.
  std::unique_ptr<Communicator> tp, cp, dp, world, ep, pp, etp, edp;
  Communicator& get(Axis axis);
};

struct GroupOptions {
  std::chrono::milliseconds timeout{60000};
  CommunicatorOptions communicator;
};

RankGroups make_rank_groups(const ParallelTopology& topology, int rank,
                            const Rendezvous& rendezvous, TransportFactory& factory,
                            RankStatus* status, const GroupOptions& options);

}  // namespace parity
