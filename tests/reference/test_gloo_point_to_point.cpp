// Point-to-point messages over Gloo thread ranks (the pipeline axis): batches
// in which neighbours both send and receive, pairing by order, the pair
// fingerprints of --check-collectives, tallies, bad input and timeouts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "harness/parallel/point_to_point.h"
#include "tests/support/rank_threads.h"

namespace parity {
namespace {

using testing::Expect;
using testing::RankOutcome;
using testing::run_thread_ranks;

// What `stage` sends as its message `k`: distinct per stage and message.
at::Tensor payload(int stage, int k, at::ScalarType dtype) {
  return (at::arange(12, at::kDouble).reshape({3, 4}) + 100 * stage + 10 * k).to(dtype);
}

class GlooPointToPoint : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// A ring of 4 stages: each sends to the next and receives from the previous in
// one batch (every rank sends first: blocking sends would deadlock), twice.
TEST_P(GlooPointToPoint, NeighboursSendAndReceiveInOneBatchWithoutDeadlock) {
  const at::ScalarType dtype = GetParam();
  ParallelTopology topo(1, 1, 1, 1, 4);
  GroupOptions options;
  options.timeout = std::chrono::seconds(30);
  auto run = run_thread_ranks(
      topo, options, [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        Communicator& pp = g.get(Axis::pp);
        const int next = (pp.rank() + 1) % pp.size();
        const int previous = (pp.rank() + pp.size() - 1) % pp.size();
        for (int k = 0; k < 2; ++k) {
          const std::vector<at::Tensor> got =
              pp.exchange({PointToPointOp::send(next, payload(pp.rank(), k, dtype), k, "ring"),
                           PointToPointOp::recv(previous, at::empty({3, 4}, dtype), k, "ring")});
          expect(got.size() == 1, "one tensor received");
          expect(got[0].scalar_type() == dtype && at::equal(got[0], payload(previous, k, dtype)),
                 "rank " + std::to_string(rank) + " message " + std::to_string(k));
        }
      });
  EXPECT_EQ(run.report(), "");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GlooPointToPoint,
                         ::testing::Values(at::kFloat, at::kBFloat16, at::kLong),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// Messages of one ordered pair pair by order, whatever order a batch lists
// them in among other ops, and across batches of different shapes.
TEST(GlooPointToPointOrder, TheKthSendMeetsTheKthReceiveOfThePair) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 1, 1, 2);
  auto run = run_thread_ranks(
      topo, GroupOptions{}, [&](int, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        Communicator& pp = g.get(Axis::pp);
        if (pp.rank() == 0) {
          pp.exchange({PointToPointOp::send(1, payload(0, 0, at::kFloat), 0, "a"),
                       PointToPointOp::send(1, at::ones({5}, at::kFloat), 1, "b")});
          const auto back = pp.exchange({PointToPointOp::recv(1, at::empty({2}), 2, "c")});
          expect(at::equal(back[0], at::full({2}, 7.0)), "rank 0 got the reply");
        } else {
          // The receives are split over two batches and the reply sits between them.
          const auto first = pp.exchange({PointToPointOp::recv(0, at::empty({3, 4}), 0, "a")});
          const auto second = pp.exchange({PointToPointOp::send(0, at::full({2}, 7.0), 2, "c"),
                                           PointToPointOp::recv(0, at::empty({5}), 1, "b")});
          expect(at::equal(first[0], payload(0, 0, at::kFloat)), "first message");
          expect(second.size() == 1 && at::equal(second[0], at::ones({5})), "second message");
        }
        // Both sides of each direction tally the same messages.
        const PointToPointTally& t = pp.point_to_point_tallies()[1 - pp.rank()];
        expect(t.sends + t.recvs == 3, "three messages");
      });
  EXPECT_EQ(run.report(), "");
}

// The pipeline's pp-2 crossing (interleaved schedule): one batch sends a
// gradient and then an activation to the peer that receives the activation
// first. Channels pair them apart; on one channel they would swap silently.
TEST(GlooPointToPointOrder, ChannelsKeepAGradientAndAnActivationApart) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 1, 1, 2);
  auto run = run_thread_ranks(
      topo, GroupOptions{}, [&](int, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        Communicator& pp = g.get(Axis::pp);
        const at::Tensor gradient = at::full({4}, 1.0), activation = at::full({4}, 2.0);
        if (pp.rank() == 0) {
          pp.exchange({PointToPointOp::send(1, gradient, 1, "gradient", 1),
                       PointToPointOp::send(1, activation, 2, "activation", 0)});
        } else {
          const auto got = pp.exchange({PointToPointOp::recv(0, at::empty({4}), 2, "activation", 0),
                                        PointToPointOp::recv(0, at::empty({4}), 1, "gradient", 1)});
          expect(at::equal(got[0], activation), "the activation arrived as the activation");
          expect(at::equal(got[1], gradient), "the gradient arrived as the gradient");
        }
      });
  EXPECT_EQ(run.report(), "");
}

// Rank a's sends to b and rank b's receives from a hash equal iff every message
// was received as it was sent; a message received under another id differs.
TEST(GlooPointToPointOrder, TalliesPairSendsWithReceives) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 1, 1, 2);
  for (const bool agree : {true, false}) {
    std::vector<PointToPointTally> tallies(2);
    auto run = run_thread_ranks(
        topo, GroupOptions{}, [&](int, RankGroups& g, RankStatus&, Expect&, RankOutcome&) {
          Communicator& pp = g.get(Axis::pp);
          if (pp.rank() == 0) {
            pp.exchange({PointToPointOp::send(1, at::ones({4}), 10, "x")});
          } else {
            pp.exchange({PointToPointOp::recv(0, at::empty({4}), agree ? 10 : 11, "x")});
          }
          tallies[static_cast<std::size_t>(pp.rank())] =
              pp.point_to_point_tallies()[static_cast<std::size_t>(1 - pp.rank())];
        });
    ASSERT_EQ(run.report(), "");
    EXPECT_EQ(tallies[0].sends, 1);
    EXPECT_EQ(tallies[1].recvs, 1);
    EXPECT_EQ(tallies[0].send_hash == tallies[1].recv_hash, agree);
  }
}

// With check_collectives both sides compare each message's fingerprint before
// any data moves, and both name the same pair.
TEST(GlooPointToPointCheck, AMessageOutOfOrderIsAMismatchNamingBothRanks) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 1, 1, 2);
  GroupOptions options;
  options.timeout = std::chrono::seconds(30);
  options.communicator.check_collectives = true;
  auto run =
      run_thread_ranks(topo, options, [&](int, RankGroups& g, RankStatus&, Expect&, RankOutcome&) {
        Communicator& pp = g.get(Axis::pp);
        if (pp.rank() == 0) {
          pp.exchange({PointToPointOp::send(1, at::ones({2, 3}), 6, "activation of microbatch 3")});
        } else {
          pp.exchange(
              {PointToPointOp::recv(0, at::empty({2, 3}), 5, "activation of microbatch 2")});
        }
      });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.outcomes[r].error_kind, "CollectiveMismatch") << run.report();
    const std::string& e = run.outcomes[r].error;
    EXPECT_NE(e.find("rank 0 sends message 6"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1 receives message 5"), std::string::npos) << e;
    EXPECT_NE(e.find("float32 [2, 3]"), std::string::npos) << e;
  }
  EXPECT_NE(run.outcomes[0].error.find("activation of microbatch 3"), std::string::npos);
  EXPECT_NE(run.outcomes[1].error.find("activation of microbatch 2"), std::string::npos);
}

TEST(GlooPointToPointCheck, MatchingMessagesPassTheCheck) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 1, 1, 2);
  GroupOptions options;
  options.communicator.check_collectives = true;
  auto run = run_thread_ranks(
      topo, options, [&](int, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        Communicator& pp = g.get(Axis::pp);
        const int peer = 1 - pp.rank();
        const auto got =
            pp.exchange({PointToPointOp::send(peer, payload(pp.rank(), 0, at::kFloat), 1, "x"),
                         PointToPointOp::recv(peer, at::empty({3, 4}), 1, "x")});
        expect(at::equal(got[0], payload(peer, 0, at::kFloat)), "data after the check");
      });
  EXPECT_EQ(run.report(), "");
}

TEST(GlooPointToPointInput, BadPeersAreRefusedBeforeAnythingMoves) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 1, 1, 2);
  auto run = run_thread_ranks(
      topo, GroupOptions{}, [&](int, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        Communicator& pp = g.get(Axis::pp);
        for (int peer : {-1, 2, pp.rank()}) {
          bool refused = false;
          try {
            pp.exchange({PointToPointOp::send(peer, at::ones({1}), 0, "x")});
          } catch (const std::invalid_argument& e) {
            refused = std::string(e.what()).find("pp group [0, 1]") != std::string::npos;
          }
          expect(refused, "peer " + std::to_string(peer) + " refused naming the group");
        }
        expect(pp.point_to_point_tallies().empty() || pp.point_to_point_tallies()[0].sends == 0,
               "nothing tallied");
      });
  EXPECT_EQ(run.report(), "");
}

// A receive nobody sends times out, naming the message, and the rank's status
// holds it as its last call (what a hang report prints).
TEST(GlooPointToPointTimeout, AReceiveNobodySendsTimesOutNamingTheMessage) {
  at::set_num_threads(1);
  ParallelTopology topo(1, 1, 1, 1, 2);
  GroupOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  std::string last;
  auto run = run_thread_ranks(
      topo, options, [&](int, RankGroups& g, RankStatus& status, Expect&, RankOutcome&) {
        Communicator& pp = g.get(Axis::pp);
        if (pp.rank() == 1) {
          try {
            pp.exchange({PointToPointOp::recv(0, at::empty({4}), 3, "gradient of microbatch 1")});
          } catch (...) {
            last = status.last_collective();
            throw;
          }
        }
      });
  EXPECT_EQ(run.outcomes[0].error, "");
  EXPECT_EQ(run.outcomes[1].error_kind, "CollectiveTimeout") << run.report();
  EXPECT_NE(run.outcomes[1].error.find("recv(from pp rank 0: gradient of microbatch 1)"),
            std::string::npos)
      << run.outcomes[1].error;
  EXPECT_NE(last.find("recv(from pp rank 0: gradient of microbatch 1) on pp, float32 [4]"),
            std::string::npos)
      << last;
}

}  // namespace
}  // namespace parity
