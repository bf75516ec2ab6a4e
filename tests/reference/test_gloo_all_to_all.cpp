// The uneven all-to-all over Gloo on thread ranks: the ep groups that
// make_rank_groups builds, uneven and zero counts against a direct computation,
// fingerprints that pass uneven counts and catch real mismatches, and the
// native Gloo exchange against the transport-agnostic default.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <mutex>
#include <thread>

#include "harness/parallel/all_to_all.h"
#include "harness/parallel/communicator.h"
#include "reference/gloo_transport.h"
#include "tests/support/rank_threads.h"

namespace parity {
namespace {

using testing::Expect;
using testing::RankOutcome;
using testing::run_thread_ranks;

// Rows group rank s sends to group rank d in a group of n: uneven, rank 0
// sends nothing and rank n-1 receives nothing.
std::int64_t rows(int s, int d, int n) {
  if (s == 0 || d == n - 1) return 0;
  return (s + 2 * d) % 4;
}

// The rows themselves: each names its source, destination and index.
at::Tensor block(int s, int d, int n, at::ScalarType dtype) {
  const at::Tensor i = at::arange(rows(s, d, n), at::kDouble).unsqueeze(1);
  return (i * 3 + at::arange(3, at::kDouble) + 100.0 * s + 10.0 * d).to(dtype);
}

class GlooAllToAll : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// tp2 cp2 dp2 ep4: two ep groups of four ({0, 2, 4, 6} and {1, 3, 5, 7}).
TEST_P(GlooAllToAll, UnevenAndZeroCountsMatchADirectComputation) {
  const at::ScalarType dtype = GetParam();
  ParallelTopology topo(2, 2, 2, 4);
  GroupOptions options;
  options.timeout = std::chrono::seconds(20);
  options.communicator.check_collectives = true;  // uneven counts are no mismatch
  std::vector<std::uint64_t> hashes(topo.world_size());
  auto run = run_thread_ranks(
      topo, options, [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        Communicator& ep = *g.ep;
        expect(ep.global_ranks() == topo.group_ranks(rank, Axis::ep), "ep group members");
        const int me = ep.rank(), n = ep.size();
        std::vector<std::int64_t> send;
        std::vector<at::Tensor> mine, want;
        std::vector<std::int64_t> want_counts;
        for (int d = 0; d < n; ++d) {
          send.push_back(rows(me, d, n));
          mine.push_back(block(me, d, n, dtype));
        }
        for (int s = 0; s < n; ++s) {
          want_counts.push_back(rows(s, me, n));
          want.push_back(block(s, me, n, dtype));
        }
        const at::Tensor x = at::cat(mine, 0);
        const AllToAllResult r = ep.all_to_all(x, send);
        const at::Tensor expected = at::cat(want, 0);
        expect(r.output.scalar_type() == dtype && r.output.sizes() == expected.sizes() &&
                   at::equal(r.output, expected),
               "all_to_all output on group rank " + std::to_string(me));
        expect(r.recv_counts == want_counts, "receive counts on group rank " + std::to_string(me));
        expect(at::equal(x, at::cat(mine, 0)), "input was modified");
        // Everyone sends nothing: an empty result, the call sequence still symmetric.
        const AllToAllResult none =
            ep.all_to_all(at::empty({0, 3}, dtype), std::vector<std::int64_t>(n, 0));
        expect(none.output.size(0) == 0 && none.output.size(1) == 3, "empty all_to_all shape");
        expect(ep.calls_issued() == 4, "two calls per all_to_all");
        hashes[rank] = ep.call_hash();
      });
  EXPECT_EQ(run.report(), "");
  // collective_symmetry: every member of a group issued the same fingerprints.
  for (int r = 0; r < topo.world_size(); ++r)
    EXPECT_EQ(hashes[r], hashes[topo.group_ranks(r, Axis::ep)[0]]) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GlooAllToAll,
                         ::testing::Values(at::kFloat, at::kDouble, at::kBFloat16),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

TEST(GlooAllToAllFingerprints, RowsOfADifferentWidthAreAMismatchOnTheDataCall) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 2, 2);
  GroupOptions options;
  options.timeout = std::chrono::seconds(60);  // a hang would be CollectiveTimeout
  options.communicator.check_collectives = true;
  auto run = run_thread_ranks(topo, options,
                              [&](int rank, RankGroups& g, RankStatus&, Expect&, RankOutcome&) {
                                g.ep->all_to_all(at::ones({3, rank == 1 ? 4 : 3}), {1, 2});
                              });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.outcomes[r].error_kind, "CollectiveMismatch") << run.report();
    EXPECT_EQ(run.outcomes[r].error,
              "collective mismatch on ep group [0, 1]: rank 0 called all_to_all on ep, float32 "
              "[2, 2, 3], #1 but rank 1 called all_to_all on ep, float32 [2, 2, 4], #1");
  }
}

TEST(GlooAllToAllFingerprints, AnAllToAllAgainstAnotherCollectiveIsCaughtAtTheCounts) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 2, 2);
  GroupOptions options;
  options.timeout = std::chrono::seconds(60);
  options.communicator.check_collectives = true;
  auto run = run_thread_ranks(topo, options,
                              [&](int rank, RankGroups& g, RankStatus&, Expect&, RankOutcome&) {
                                if (rank == 0)
                                  g.ep->all_to_all(at::ones({2, 3}), {1, 1});
                                else
                                  g.ep->all_gather(at::ones({2}, at::kLong), 0);
                              });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.outcomes[r].error_kind, "CollectiveMismatch") << run.report();
    EXPECT_EQ(run.outcomes[r].error,
              "collective mismatch on ep group [0, 1]: rank 0 called all_to_all_counts on ep, "
              "int64 [2], #0 but rank 1 called all_gather(dim 0) on ep, int64 [2], #0");
  }
}

// Gloo's native equal-chunk exchange (alltoall_base) and the default every
// transport inherits (an all-gather, keeping this rank's chunks) agree.
TEST(GlooAllToAllTransport, NativeAndDefaultExchangeAgree) {
  at::set_num_threads(1);
  constexpr int kRanks = 3;
  auto rendezvous = Rendezvous::in_process(std::chrono::seconds(30));
  testing::Latch before_teardown(kRanks);
  std::vector<std::string> failures(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);
      try {
        auto t = reference::make_gloo_transport(*rendezvous, "a2a-test", r, kRanks,
                                                std::chrono::milliseconds(20000));
        for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
          // Chunk d of rank r: [2, 2] filled with 10*r + d.
          std::vector<at::Tensor> chunks, want;
          for (int d = 0; d < kRanks; ++d) chunks.push_back(at::full({1, 2, 2}, 10.0 * r + d));
          for (int s = 0; s < kRanks; ++s) want.push_back(at::full({1, 2, 2}, 10.0 * s + r));
          const at::Tensor x = at::cat(chunks, 0).to(dtype);
          const at::Tensor expected = at::cat(want, 0).to(dtype);
          const at::Tensor native = t->all_to_all(x);
          const at::Tensor portable = t->CollectiveTransport::all_to_all(x);
          if (!at::equal(native, expected) || native.scalar_type() != dtype)
            failures[r] += "native all_to_all differs; ";
          if (!at::equal(portable, expected) || portable.scalar_type() != dtype)
            failures[r] += "default all_to_all differs; ";
        }
      } catch (const std::exception& e) {
        failures[r] += e.what();
      }
      before_teardown.arrive_and_wait();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

}  // namespace
}  // namespace parity
