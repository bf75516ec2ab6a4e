// The MoE dispatcher's mappings (harness/backend/ep_mappings.h) on thread
// ranks over Gloo: forward against a direct computation, backward against the
// adjoint computed directly, and finite differences across ranks.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <functional>

#include "harness/backend/ep_mappings.h"
#include "harness/backend/tp_mappings.h"
#include "harness/parallel/communicator.h"
#include "tests/backend/gradcheck.h"
#include "tests/support/rank_threads.h"

namespace parity {
namespace {

using testing::Expect;
using testing::RankOutcome;
using testing::run_thread_ranks;

constexpr std::int64_t kWidth = 2;  // elements per row (token)

// tp2 x dp3 with ep3: tp groups {0,1} {2,3} {4,5}; ep groups {0,2,4} {1,3,5}.
ParallelTopology topology() { return ParallelTopology(2, 1, 3, 3); }

GroupOptions options() {
  GroupOptions o;
  o.timeout = std::chrono::seconds(30);
  o.communicator.check_collectives = true;
  return o;
}

// Rows group rank s sends to group rank d in a group of n: uneven; rank 0
// sends nothing and rank n-1 receives nothing.
std::int64_t rows(int s, int d, int n) { return (s == 0 || d == n - 1) ? 0 : 1 + (s + d) % 3; }
std::int64_t rows_sent(int s, int n) {
  std::int64_t total = 0;
  for (int d = 0; d < n; ++d) total += rows(s, d, n);
  return total;
}
// Where rank s's rows for d start in d's output (rows from lower ranks first).
std::int64_t offset_at(int s, int d, int n) {
  std::int64_t o = 0;
  for (int q = 0; q < s; ++q) o += rows(q, d, n);
  return o;
}
// ... and in s's input (its rows for lower destinations first).
std::int64_t offset_in(int s, int d, int n) {
  std::int64_t o = 0;
  for (int q = 0; q < d; ++q) o += rows(s, q, n);
  return o;
}

// Any rank's leaf can be rebuilt on any rank: it depends on the global rank only.
at::Tensor leaf_of(int global_rank, std::int64_t n_rows) {
  return testing::random_leaf({n_rows, kWidth}, 100 + global_rank);
}
at::Tensor weights_of(int global_rank, std::int64_t n_rows) {
  return testing::random_leaf({n_rows, kWidth}, 500 + global_rank).detach();
}

// Finite differences across ranks: each rank's leaf is checked in turn while the
// others evaluate the same global loss as often, unperturbed, so the
// collectives inside stay paired. `numel[p]` is group rank p's leaf size.
void check_in_turn(Communicator& c, const std::vector<std::int64_t>& numel, const at::Tensor& leaf,
                   const std::function<at::Tensor()>& global_loss, Expect& expect) {
  for (int p = 0; p < c.size(); ++p) {
    if (p == c.rank()) {
      const ::testing::AssertionResult r = testing::check_gradients(global_loss, {leaf});
      expect(static_cast<bool>(r),
             "gradients of group rank " + std::to_string(p) + ": " + r.message());
    } else {
      global_loss().backward();
      at::NoGradGuard no_grad;
      for (std::int64_t i = 0; i < 2 * numel[p]; ++i) global_loss();
    }
    if (leaf.grad().defined()) leaf.mutable_grad().zero_();
  }
}

// The sum over the group of each rank's weighted output: every rank's gradient
// is then its share of one global loss (reduce_from_...: identity backward).
at::Tensor global(const at::Tensor& local, Communicator& c, int global_rank) {
  return reduce_from_tensor_parallel_region(
             testing::weighted_sum(local, 7 + global_rank).reshape({1}), &c)
      .sum();
}

TEST(EpMappings, AllToAllExpertParallelRoutesRowsForwardAndGradientsBack) {
  at::set_num_threads(1);
  const ParallelTopology topo = topology();
  auto run = run_thread_ranks(
      topo, options(), [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        const ParallelContext pc = ParallelContext::from(g);
        Communicator& ep = *pc.ep;
        const int me = pc.ep_rank(), n = pc.ep_size();
        const std::vector<int> members = ep.global_ranks();
        std::vector<std::int64_t> send, numel;
        for (int d = 0; d < n; ++d) send.push_back(rows(me, d, n));
        for (int s = 0; s < n; ++s) numel.push_back(rows_sent(s, n) * kWidth);
        const at::Tensor x = leaf_of(rank, rows_sent(me, n));

        // Forward: every rank's rows for me, rank 0's first.
        const AllToAllResult r = all_to_all_expert_parallel(x, send, &ep);
        std::vector<at::Tensor> want;
        std::vector<std::int64_t> want_counts;
        for (int s = 0; s < n; ++s) {
          want.push_back(
              leaf_of(members[s], rows_sent(s, n)).narrow(0, offset_in(s, me, n), rows(s, me, n)));
          want_counts.push_back(rows(s, me, n));
        }
        expect(at::equal(r.output, at::cat(want, 0)), "forward rows");
        expect(r.recv_counts == want_counts, "receive counts");
        expect(r.output.requires_grad(), "the output carries autograd history");

        // Backward: the gradient of sum(out_d * w_d) reaches my rows from w_d.
        std::vector<at::Tensor> grads;
        for (int d = 0; d < n; ++d) {
          std::int64_t received = 0;
          for (int s = 0; s < n; ++s) received += rows(s, d, n);
          grads.push_back(
              weights_of(members[d], received).narrow(0, offset_at(me, d, n), rows(me, d, n)));
        }
        (r.output * weights_of(rank, r.output.size(0))).sum().backward();
        expect(x.grad().defined() && at::equal(x.grad(), at::cat(grads, 0)), "backward rows");
        x.mutable_grad().zero_();

        check_in_turn(
            ep, numel, x,
            [&] { return global(all_to_all_expert_parallel(x, send, &ep).output, ep, rank); },
            expect);
      });
  EXPECT_EQ(run.report(), "");
}

TEST(EpMappings, GatherRowsConcatenatesUnevenTpRowsAndReduceScattersGradients) {
  at::set_num_threads(1);
  const ParallelTopology topo = topology();
  auto run = run_thread_ranks(
      topo, options(), [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        const ParallelContext pc = ParallelContext::from(g);
        Communicator& tp = *pc.tp;
        const std::vector<int> members = tp.global_ranks();
        // Uneven rows, then a rank with none.
        for (const std::vector<std::int64_t>& counts :
             {std::vector<std::int64_t>{3, 1}, std::vector<std::int64_t>{0, 2}}) {
          const at::Tensor x = leaf_of(rank, counts[pc.tp_rank()]);
          const AllToAllResult r = gather_rows_from_tensor_parallel_region(x, &tp);
          std::vector<at::Tensor> want;
          for (int s = 0; s < tp.size(); ++s) want.push_back(leaf_of(members[s], counts[s]));
          expect(at::equal(r.output, at::cat(want, 0)), "gathered rows");
          expect(r.recv_counts == counts, "row counts");
          // Backward: my rows of every rank's weights, summed over tp.
          std::int64_t start = 0;
          for (int s = 0; s < pc.tp_rank(); ++s) start += counts[s];
          at::Tensor want_grad = at::zeros({counts[pc.tp_rank()], kWidth}, at::kDouble);
          for (int s = 0; s < tp.size(); ++s)
            want_grad +=
                weights_of(members[s], r.output.size(0)).narrow(0, start, counts[pc.tp_rank()]);
          (r.output * weights_of(rank, r.output.size(0))).sum().backward();
          expect(x.grad().defined() && at::allclose(x.grad(), want_grad, 0, 1e-12),
                 "reduce-scattered gradient");
          x.mutable_grad().zero_();

          std::vector<std::int64_t> numel;
          for (std::int64_t c : counts) numel.push_back(c * kWidth);
          check_in_turn(
              tp, numel, x,
              [&] {
                return global(gather_rows_from_tensor_parallel_region(x, &tp).output, tp, rank);
              },
              expect);
        }
      });
  EXPECT_EQ(run.report(), "");
}

TEST(EpMappings, ReduceScatterRowsSumsMyRowsOverTpAndGathersGradients) {
  at::set_num_threads(1);
  const ParallelTopology topo = topology();
  auto run = run_thread_ranks(
      topo, options(), [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        const ParallelContext pc = ParallelContext::from(g);
        Communicator& tp = *pc.tp;
        const std::vector<int> members = tp.global_ranks();
        const std::vector<std::int64_t> counts{0, 3};  // tp rank 0 keeps no rows
        const at::Tensor x = leaf_of(rank, 3);
        const at::Tensor out = reduce_scatter_rows_to_tensor_parallel_region(x, counts, &tp);
        const std::int64_t start = pc.tp_rank() == 0 ? 0 : counts[0];
        at::Tensor want = at::zeros({counts[pc.tp_rank()], kWidth}, at::kDouble);
        for (int s = 0; s < tp.size(); ++s)
          want += leaf_of(members[s], 3).narrow(0, start, counts[pc.tp_rank()]);
        expect(out.sizes() == want.sizes() && at::allclose(out, want, 0, 1e-12), "my summed rows");
        check_in_turn(
            tp, {3 * kWidth, 3 * kWidth}, x,
            [&] {
              return global(reduce_scatter_rows_to_tensor_parallel_region(x, counts, &tp), tp,
                            rank);
            },
            expect);
      });
  EXPECT_EQ(run.report(), "");
}

TEST(EpMappings, WithoutACommunicatorEveryMappingIsTheIdentity) {
  const at::Tensor x = testing::random_leaf({4, kWidth}, 3);
  const AllToAllResult a = all_to_all_expert_parallel(x, {4}, nullptr);
  EXPECT_TRUE(a.output.is_same(x));
  EXPECT_EQ(a.recv_counts, (std::vector<std::int64_t>{4}));
  EXPECT_THROW(all_to_all_expert_parallel(x, {3}, nullptr), c10::Error);
  const AllToAllResult gathered = gather_rows_from_tensor_parallel_region(x, nullptr);
  EXPECT_TRUE(gathered.output.is_same(x));
  EXPECT_EQ(gathered.recv_counts, (std::vector<std::int64_t>{4}));
  EXPECT_TRUE(reduce_scatter_rows_to_tensor_parallel_region(x, {4}, nullptr).is_same(x));
}

}  // namespace
}  // namespace parity
