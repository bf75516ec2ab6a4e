#pragma once
// The parallel layout of a run: world = TP x CP x DP x PP in Megatron's rank
// order (tp fastest, then cp, then dp, then pp: Megatron's default order
// "tp-cp-ep-dp-pp"), and the expert-parallel (EP) axis laid out inside the
// cp x dp ranks of each pipeline stage as Megatron's expert rank generator does
// (order tp-ep-edp, expert tensor parallel = tp). Pure arithmetic, no torch.
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace parity {

// ep and pp come after world so the model axes keep their indices 0..2
// (placements, fingerprints). ep is a group axis only: it is not one of
// kModelAxes, because a metric's placement is over the dense layout (tp, cp,
// dp) that EP re-slices. pp is the pipeline axis: its group joins the stages
// that hold the same (tp, cp, dp) slice and carries point-to-point traffic.
enum class Axis { tp, cp, dp, world, ep, pp };
inline constexpr std::array<Axis, 3> kModelAxes{Axis::tp, Axis::cp, Axis::dp};
std::string_view to_string(Axis axis);

struct RankCoordinates {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  int pp = 0;  // the pipeline stage
  // The run has a pipeline axis (pp > 1): names print the stage. Set by
  // ParallelTopology::coordinates, so runs without PP keep their names.
  bool pipelined = false;
  friend bool operator==(const RankCoordinates& a, const RankCoordinates& b) {
    return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp && a.pp == b.pp;
  }
};
// "(tp=1, cp=0, dp=1)", or "(tp=1, cp=0, dp=1, pp=0)" when pipelined.
std::string to_string(const RankCoordinates& c);

class ParallelTopology {
 public:
  // Sizes must be >= 1 and ep must divide cp*dp (validate_run_config says so
  // first, naming the field); throws std::invalid_argument otherwise.
  ParallelTopology(int tp, int cp, int dp, int ep = 1, int pp = 1);

  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int ep() const { return ep_; }
  int pp() const { return pp_; }
  int world_size() const { return tp_ * cp_ * dp_ * pp_; }
  int size(Axis axis) const;

  RankCoordinates coordinates(int rank) const;
  int rank_of(const RankCoordinates& c) const;
  int coordinate(int rank, Axis axis) const;  // this rank's index within `axis`
  // With j = cp + CP*dp (the rank's combined cp/dp index): ep_rank = j mod EP,
  // and the expert-data-parallel index (which EP group) is j / EP.
  int ep_rank(int rank) const;
  int expert_data_parallel_rank(int rank) const;
  // Global ranks of the group along `axis` that contains `rank`, in group order
  // (pp: stage 0 first).
  std::vector<int> group_ranks(int rank, Axis axis) const;
  // A name unique per group, e.g. "tp.cp0.dp1", "ep.tp0.edp1" or
  // "pp.tp0.cp0.dp1" (store prefixes, reports); with pp > 1 the groups inside a
  // stage end in ".pp<stage>".
  std::string group_name(int rank, Axis axis) const;

 private:
  int tp_, cp_, dp_, ep_, pp_;
};

}  // namespace parity
