#pragma once
// The communicators one rank's model uses, per axis. A null communicator is a
// group of one (no transport needed): the single-rank path never touches a
// Communicator at all.
#include "harness/parallel/communicator.h"
#include "harness/parallel/process_groups.h"

namespace parity {

struct ParallelContext {
  Communicator* tp = nullptr;
  Communicator* cp = nullptr;
  Communicator* dp = nullptr;
  // Expert parallel: Megatron's expert layout (ParallelTopology::ep_rank).
  Communicator* ep = nullptr;
  // Pipeline: the stages holding this rank's (tp, cp, dp) slice; its group
  // rank is the stage (point-to-point, harness/parallel/point_to_point.h).
  Communicator* pp = nullptr;
  // The experts' own TP group (Megatron's expert_tensor_parallel group) and
  // expert-data-parallel group, when the experts have a TP size of their own;
  // null otherwise: the experts split over tp, and expert_tp() is tp.
  Communicator* etp = nullptr;
  Communicator* edp = nullptr;

  static int rank_of(const Communicator* c) { return c ? c->rank() : 0; }
  static int size_of(const Communicator* c) { return c ? c->size() : 1; }
  int tp_rank() const { return rank_of(tp); }
  int tp_size() const { return size_of(tp); }
  int cp_rank() const { return rank_of(cp); }
  int cp_size() const { return size_of(cp); }
  int dp_rank() const { return rank_of(dp); }
  int dp_size() const { return size_of(dp); }
  int ep_rank() const { return rank_of(ep); }
  int ep_size() const { return size_of(ep); }
  int pp_rank() const { return rank_of(pp); }
  int pp_size() const { return size_of(pp); }
  Communicator* expert_tp() const { return etp ? etp : tp; }
  int expert_tp_rank() const { return rank_of(expert_tp()); }
  int expert_tp_size() const { return size_of(expert_tp()); }

  static ParallelContext single() { return {}; }
  static ParallelContext from(RankGroups& groups) {
    return ParallelContext{groups.tp.get(), groups.cp.get(),  groups.dp.get(), groups.ep.get(),
                           groups.pp.get(), groups.etp.get(), groups.edp.get()};
  }
};

// The sum of `t` over `group`'s ranks; `t` itself, without a collective, when
// there is no group or it has one member.
inline at::Tensor sum_over(Communicator* group, const at::Tensor& t) {
  return group && group->size() > 1 ? group->all_reduce(t.contiguous(), ReduceOp::sum) : t;
}

}  // namespace parity
