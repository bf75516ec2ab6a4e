#include "harness/parallel/process_groups.h"

#include <map>
#include <mutex>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/parallel/rank_status.h"

namespace parity {

namespace {

using Maker = std::function<std::unique_ptr<TransportFactory>()>;

// Function-local statics: registrars in other translation units (static
// initializers of OBJECT libraries) may run before anything here.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Maker>& registry() {
  static std::map<std::string, Maker> r;
  return r;
}

}  // namespace

void register_transport_factory(const std::string& name, Maker make) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[name] = std::move(make);
}

std::unique_ptr<TransportFactory> make_transport_factory(const std::string& name) {
  Maker make;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(name);
    if (it != registry().end()) {
      make = it->second;
    } else {
      for (const auto& [n, _] : registry()) known += (known.empty() ? "" : ", ") + n;
    }
  }
  PARITY_CHECK(
      make, "unknown transport '" + name + "' (known: " + (known.empty() ? "none" : known) + ")");
  return make();
}

Communicator& RankGroups::get(Axis axis) {
  std::unique_ptr<Communicator>* c = nullptr;
  switch (axis) {
    case Axis::tp:
      c = &tp;
      break;
    case Axis::cp:
      c = &cp;
      break;
    case Axis::dp:
      c = &dp;
      break;
    case Axis::world:
      c = &world;
      break;
    case Axis::ep:
      c = &ep;
      break;
    case Axis::pp:
      c = &pp;
      break;
    case Axis::etp:
      c = etp ? &etp : &tp;
      break;
    case Axis::edp:
      c = &edp;
      break;
  }
  if (!c || !*c) PARITY_FAIL_INTERNAL("no " + std::string(to_string(axis)) + " group");
  return **c;
}

// Creation order is part of the protocol: every rank creates tp, cp, dp, ep,
// pp, (etp, edp,) world in that order (etp and edp on every rank or none: the
// topology decides). Creating a group of more than one rank blocks until all its
// members have joined (Gloo connects a full mesh), so ranks that created their
// groups in different orders could wait on each other forever (until the
// timeout). Groups of one rank get no transport and never wait.
RankGroups make_rank_groups(const ParallelTopology& topology, int rank,
                            const Rendezvous& rendezvous, TransportFactory& factory,
                            RankStatus* status, const GroupOptions& options) {
  if (rank < 0 || rank >= topology.world_size())
    throw std::out_of_range("rank " + std::to_string(rank) + " outside a world of " +
                            std::to_string(topology.world_size()));
  RankGroups groups;
  const bool expert_layout = topology.etp() != topology.tp();
  for (Axis axis :
       {Axis::tp, Axis::cp, Axis::dp, Axis::ep, Axis::pp, Axis::etp, Axis::edp, Axis::world}) {
    if ((axis == Axis::etp || axis == Axis::edp) && !expert_layout) continue;
    std::vector<int> ranks = topology.group_ranks(rank, axis);
    int index = -1;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank) index = static_cast<int>(i);
    PARITY_CHECK_INTERNAL(index >= 0, "rank not in its own group");
    std::unique_ptr<CollectiveTransport> transport;
    const int size = static_cast<int>(ranks.size());
    if (size > 1)
      transport =
          factory.create(rendezvous, topology.group_name(rank, axis), index, size, options.timeout);
    if (status) status->mark_progress();
    auto comm = std::make_unique<Communicator>(axis, std::move(ranks), index, std::move(transport),
                                               status, options.communicator);
    switch (axis) {
      case Axis::tp:
        groups.tp = std::move(comm);
        break;
      case Axis::cp:
        groups.cp = std::move(comm);
        break;
      case Axis::dp:
        groups.dp = std::move(comm);
        break;
      case Axis::world:
        groups.world = std::move(comm);
        break;
      case Axis::ep:
        groups.ep = std::move(comm);
        break;
      case Axis::pp:
        groups.pp = std::move(comm);
        break;
      case Axis::etp:
        groups.etp = std::move(comm);
        break;
      case Axis::edp:
        groups.edp = std::move(comm);
        break;
    }
  }
  return groups;
}

}  // namespace parity
