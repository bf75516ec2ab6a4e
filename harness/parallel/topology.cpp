#include "harness/parallel/topology.h"
#include "harness/base/check.h"

#include <stdexcept>

namespace parity {

std::string_view to_string(Axis axis) {
  switch (axis) {
    case Axis::tp:
      return "tp";
    case Axis::cp:
      return "cp";
    case Axis::dp:
      return "dp";
    case Axis::world:
      return "world";
    case Axis::ep:
      return "ep";
    case Axis::pp:
      return "pp";
    case Axis::etp:
      return "etp";
    case Axis::edp:
      return "edp";
  }
  return "?";
}

std::string to_string(const RankCoordinates& c) {
  return "(tp=" + std::to_string(c.tp) + ", cp=" + std::to_string(c.cp) +
         ", dp=" + std::to_string(c.dp) + (c.pipelined ? ", pp=" + std::to_string(c.pp) : "") +
         (c.expert_layout ? ", etp=" + std::to_string(c.etp) + ", ep=" + std::to_string(c.ep) +
                                ", edp=" + std::to_string(c.edp)
                          : "") +
         ")";
}

ParallelTopology::ParallelTopology(int tp, int cp, int dp, int ep, int pp, int etp)
    : tp_(tp), cp_(cp), dp_(dp), ep_(ep), pp_(pp), etp_(etp > 0 ? etp : tp) {
  if (tp < 1 || cp < 1 || dp < 1 || ep < 1 || pp < 1 || etp < 0)
    PARITY_FAIL("parallel sizes must be >= 1");
  if (etp_ == tp && (cp * dp) % ep != 0)
    PARITY_FAIL("ep " + std::to_string(ep) + " must divide cp*dp = " + std::to_string(cp * dp));
  // Megatron's initialize_model_parallel: the expert layout tiles each stage.
  PARITY_CHECK((tp * cp * dp) % (etp_ * ep) == 0,
               "etp*ep = " + std::to_string(etp_ * ep) +
                   " must divide tp*cp*dp = " + std::to_string(tp * cp * dp));
}

int ParallelTopology::size(Axis axis) const {
  switch (axis) {
    case Axis::tp:
      return tp_;
    case Axis::cp:
      return cp_;
    case Axis::dp:
      return dp_;
    case Axis::world:
      return world_size();
    case Axis::ep:
      return ep_;
    case Axis::pp:
      return pp_;
    case Axis::etp:
      return etp_;
    case Axis::edp:
      return expert_dp();
  }
  return 1;
}

RankCoordinates ParallelTopology::coordinates(int rank) const {
  if (rank < 0 || rank >= world_size()) throw std::out_of_range("rank out of range");
  RankCoordinates c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.dp = (rank / (tp_ * cp_)) % dp_;
  c.pp = rank / (tp_ * cp_ * dp_);
  c.pipelined = pp_ > 1;
  const int f = rank % (tp_ * cp_ * dp_);
  c.etp = f % etp_;
  c.ep = (f / etp_) % ep_;
  c.edp = f / (etp_ * ep_);
  c.expert_layout = etp_ != tp_;
  return c;
}

int ParallelTopology::rank_of(const RankCoordinates& c) const {
  return c.tp + tp_ * (c.cp + cp_ * (c.dp + dp_ * c.pp));
}

int ParallelTopology::coordinate(int rank, Axis axis) const {
  const RankCoordinates c = coordinates(rank);
  switch (axis) {
    case Axis::tp:
      return c.tp;
    case Axis::cp:
      return c.cp;
    case Axis::dp:
      return c.dp;
    case Axis::world:
      return rank;
    case Axis::ep:
      return ep_rank(rank);
    case Axis::pp:
      return c.pp;
    case Axis::etp:
      return c.etp;
    case Axis::edp:
      return c.edp;
  }
  return 0;
}

int ParallelTopology::expert_tp_rank(int rank) const { return coordinates(rank).etp; }

int ParallelTopology::ep_rank(int rank) const { return coordinates(rank).ep; }

int ParallelTopology::expert_data_parallel_rank(int rank) const { return coordinates(rank).edp; }

int ParallelTopology::expert_rank(int rank, int etp, int ep, int edp) const {
  const int stage = tp_ * cp_ * dp_;
  return rank / stage * stage + etp + etp_ * (ep + ep_ * edp);
}

std::vector<int> ParallelTopology::group_ranks(int rank, Axis axis) const {
  std::vector<int> ranks;
  if (axis == Axis::world) {
    for (int r = 0; r < world_size(); ++r) ranks.push_back(r);
    return ranks;
  }
  RankCoordinates c = coordinates(rank);
  // The expert axes: the other two expert coordinates and the stage fixed.
  if (axis == Axis::ep || axis == Axis::etp || axis == Axis::edp) {
    for (int i = 0; i < size(axis); ++i)
      ranks.push_back(expert_rank(rank, axis == Axis::etp ? i : c.etp, axis == Axis::ep ? i : c.ep,
                                  axis == Axis::edp ? i : c.edp));
    return ranks;
  }
  for (int i = 0; i < size(axis); ++i) {
    switch (axis) {
      case Axis::tp:
        c.tp = i;
        break;
      case Axis::cp:
        c.cp = i;
        break;
      case Axis::dp:
        c.dp = i;
        break;
      case Axis::pp:
        c.pp = i;
        break;
      case Axis::world:
      case Axis::ep:
      case Axis::etp:
      case Axis::edp:
        break;
    }
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

std::string ParallelTopology::group_name(int rank, Axis axis) const {
  const RankCoordinates c = coordinates(rank);
  // Groups inside a stage carry the stage only when there are stages, so runs
  // without PP keep their store prefixes and report names.
  const std::string stage = pp_ > 1 ? ".pp" + std::to_string(c.pp) : "";
  switch (axis) {
    case Axis::tp:
      return "tp.cp" + std::to_string(c.cp) + ".dp" + std::to_string(c.dp) + stage;
    case Axis::cp:
      return "cp.tp" + std::to_string(c.tp) + ".dp" + std::to_string(c.dp) + stage;
    case Axis::dp:
      return "dp.tp" + std::to_string(c.tp) + ".cp" + std::to_string(c.cp) + stage;
    case Axis::world:
      return "world";
    case Axis::ep:
      // With ETP = TP the names runs without an expert layout always had.
      return (etp_ == tp_ ? "ep.tp" : "ep.etp") + std::to_string(c.etp) + ".edp" +
             std::to_string(c.edp) + stage;
    case Axis::etp:
      return "etp.ep" + std::to_string(c.ep) + ".edp" + std::to_string(c.edp) + stage;
    case Axis::edp:
      return "edp.etp" + std::to_string(c.etp) + ".ep" + std::to_string(c.ep) + stage;
    case Axis::pp:
      return "pp.tp" + std::to_string(c.tp) + ".cp" + std::to_string(c.cp) + ".dp" +
             std::to_string(c.dp);
  }
  return "?";
}

}  // namespace parity
