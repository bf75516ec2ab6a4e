#include "harness/parallel/topology.h"

#include <stdexcept>

namespace parity {

std::string_view to_string(Axis axis) {
  switch (axis) {
    case Axis::tp: return "tp";
    case Axis::cp: return "cp";
    case Axis::dp: return "dp";
    case Axis::world: return "world";
  }
  return "?";
}

std::string to_string(const RankCoordinates& c) {
  return "(tp=" + std::to_string(c.tp) + ", cp=" + std::to_string(c.cp) +
         ", dp=" + std::to_string(c.dp) + ")";
}

ParallelTopology::ParallelTopology(int tp, int cp, int dp) : tp_(tp), cp_(cp), dp_(dp) {
  if (tp < 1 || cp < 1 || dp < 1) throw std::invalid_argument("parallel sizes must be >= 1");
}

int ParallelTopology::size(Axis axis) const {
  switch (axis) {
    case Axis::tp: return tp_;
    case Axis::cp: return cp_;
    case Axis::dp: return dp_;
    case Axis::world: return world_size();
  }
  return 1;
}

RankCoordinates ParallelTopology::coordinates(int rank) const {
  if (rank < 0 || rank >= world_size()) throw std::out_of_range("rank out of range");
  return {rank % tp_, (rank / tp_) % cp_, rank / (tp_ * cp_)};
}

int ParallelTopology::rank_of(const RankCoordinates& c) const {
  return c.tp + tp_ * (c.cp + cp_ * c.dp);
}

int ParallelTopology::coordinate(int rank, Axis axis) const {
  const RankCoordinates c = coordinates(rank);
  switch (axis) {
    case Axis::tp: return c.tp;
    case Axis::cp: return c.cp;
    case Axis::dp: return c.dp;
    case Axis::world: return rank;
  }
  return 0;
}

std::vector<int> ParallelTopology::group_ranks(int rank, Axis axis) const {
  std::vector<int> ranks;
  if (axis == Axis::world) {
    for (int r = 0; r < world_size(); ++r) ranks.push_back(r);
    return ranks;
  }
  RankCoordinates c = coordinates(rank);
  for (int i = 0; i < size(axis); ++i) {
    (axis == Axis::tp ? c.tp : axis == Axis::cp ? c.cp : c.dp) = i;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

std::string ParallelTopology::group_name(int rank, Axis axis) const {
  const RankCoordinates c = coordinates(rank);
  switch (axis) {
    case Axis::tp: return "tp.cp" + std::to_string(c.cp) + ".dp" + std::to_string(c.dp);
    case Axis::cp: return "cp.tp" + std::to_string(c.tp) + ".dp" + std::to_string(c.dp);
    case Axis::dp: return "dp.tp" + std::to_string(c.tp) + ".cp" + std::to_string(c.cp);
    case Axis::world: return "world";
  }
  return "?";
}

}  // namespace parity
