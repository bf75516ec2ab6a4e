#pragma once
// The parallel layout of a run: world = TP x CP x DP in Megatron's rank order
// (tp fastest, then cp, then dp). Pure arithmetic, no torch.
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace parity {

enum class Axis { tp, cp, dp, world };
inline constexpr std::array<Axis, 3> kModelAxes{Axis::tp, Axis::cp, Axis::dp};
std::string_view to_string(Axis axis);

struct RankCoordinates {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  friend bool operator==(const RankCoordinates& a, const RankCoordinates& b) {
    return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp;
  }
};
// "(tp=1, cp=0, dp=1)"
std::string to_string(const RankCoordinates& c);

class ParallelTopology {
 public:
  // Sizes must be >= 1 (validated by validate_run_config before we get here).
  ParallelTopology(int tp, int cp, int dp);

  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int world_size() const { return tp_ * cp_ * dp_; }
  int size(Axis axis) const;

  RankCoordinates coordinates(int rank) const;
  int rank_of(const RankCoordinates& c) const;
  int coordinate(int rank, Axis axis) const;  // this rank's index within `axis`
  // Global ranks of the group along `axis` that contains `rank`, in group order.
  std::vector<int> group_ranks(int rank, Axis axis) const;
  // A name unique per group, e.g. "tp.cp0.dp1" (store prefixes, reports).
  std::string group_name(int rank, Axis axis) const;

 private:
  int tp_, cp_, dp_;
};

}  // namespace parity
