#pragma once
// The parallel layout of a run: world = TP x CP x DP x PP in Megatron's rank
// order (tp fastest, then cp, then dp, then pp: Megatron's default order
// "tp-cp-ep-dp-pp"), and the expert layout of each pipeline stage as Megatron's
// expert rank generator lays it over the same ranks: expert tensor parallel
// (ETP, default tp) fastest, then expert parallel (EP), then expert data
// parallel (EDP = tp*cp*dp / (etp*ep)). With ETP = tp the EP axis lies inside
// the cp x dp ranks. Pure arithmetic, no torch.
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
// etp and edp are the expert layout's other two axes (groups only, like ep).
enum class Axis { tp, cp, dp, world, ep, pp, etp, edp };
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
  // The expert layout's coordinates (Megatron's expert rank generator).
  int etp = 0;
  int ep = 0;
  int edp = 0;
  // The experts split over a TP size of their own (etp != tp): names print
  // the expert coordinates too.
  bool expert_layout = false;
  friend bool operator==(const RankCoordinates& a, const RankCoordinates& b) {
    return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp && a.pp == b.pp;
  }
};
// "(tp=1, cp=0, dp=1)", or "(tp=1, cp=0, dp=1, pp=0)" when pipelined; with
// an expert layout of its own "..., etp=0, ep=1, edp=0)" follows.
std::string to_string(const RankCoordinates& c);

class ParallelTopology {
 public:
  // Sizes must be >= 1 and etp*ep must divide tp*cp*dp (with etp = tp: ep
  // divides cp*dp; validate_run_config says so first, naming the field);
  // throws std::invalid_argument otherwise. etp 0 = tp (Megatron's default).
  ParallelTopology(int tp, int cp, int dp, int ep = 1, int pp = 1, int etp = 0);

  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int ep() const { return ep_; }
  int pp() const { return pp_; }
  int etp() const { return etp_; }
  int expert_dp() const { return tp_ * cp_ * dp_ / (etp_ * ep_); }
  int world_size() const { return tp_ * cp_ * dp_ * pp_; }
  int size(Axis axis) const;

  RankCoordinates coordinates(int rank) const;
  int rank_of(const RankCoordinates& c) const;
  int coordinate(int rank, Axis axis) const;  // this rank's index within `axis`
  // With f = tp + TP*(cp + CP*dp) (the rank's index within its stage):
  // etp_rank = f mod ETP, ep_rank = (f / ETP) mod EP and the expert-data-
  // parallel index f / (ETP*EP). With ETP = TP: ep_rank = j mod EP and
  // edp = j / EP for j = cp + CP*dp.
  int expert_tp_rank(int rank) const;
  int ep_rank(int rank) const;
  int expert_data_parallel_rank(int rank) const;
  // Global ranks of the group along `axis` that contains `rank`, in group order
  // (pp: stage 0 first).
  std::vector<int> group_ranks(int rank, Axis axis) const;
  // A name unique per group, e.g. "tp.cp0.dp1", "ep.tp0.edp1" (with etp != tp
  // "ep.etp0.edp1", "etp.ep1.edp0", "edp.etp0.ep1") or "pp.tp0.cp0.dp1" (store
  // prefixes, reports); with pp > 1 the groups inside a stage end in ".pp<stage>".
  std::string group_name(int rank, Axis axis) const;

 private:
  int tp_, cp_, dp_, ep_, pp_, etp_;
  // The rank with the same stage and the given expert coordinates.
  int expert_rank(int rank, int etp, int ep, int edp) const;
};

}  // namespace parity
