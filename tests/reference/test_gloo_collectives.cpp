// The simulated-rank runtime over Gloo: 8 thread ranks (tp2 x cp2 x dp2), every
// collective against a direct computation, fingerprints, timeouts, status.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "harness/base/files.h"
#include "harness/parallel/communicator.h"
#include "harness/runtime/launcher.h"
#include "tests/support/rank_threads.h"

namespace parity {
namespace {

using testing::Expect;
using testing::RankOutcome;
using testing::run_thread_ranks;

// What global rank `rank` contributes on `axis`: exact in bf16 (small
// integers) so reductions compare bit for bit in every dtype; depends on the
// rank and the axis so every group sees different data.
at::Tensor input_of(int rank, Axis axis, at::ScalarType dtype) {
  const auto a = static_cast<int>(axis);
  at::Tensor t = at::arange(8 * 16, at::kDouble).reshape({8, 16});
  t = at::fmod(t * (rank + 1) + 3 * a, 7.0) - 3.0 + rank;  // integers in [-3, 10]
  return t.to(dtype);
}

// The direct computations, in the dtype the transport promises: bf16 is
// reduced in fp32 then converted back.
at::Tensor direct_reduce(const std::vector<int>& ranks, Axis axis, at::ScalarType dtype,
                         ReduceOp op) {
  const at::ScalarType wire = dtype == at::kBFloat16 ? at::kFloat : dtype;
  at::Tensor acc;
  for (int r : ranks) {
    at::Tensor x = input_of(r, axis, dtype).to(wire);
    if (!acc.defined()) {
      acc = x.clone();
    } else if (op == ReduceOp::sum) {
      acc = acc + x;
    } else if (op == ReduceOp::max) {
      acc = at::maximum(acc, x);
    } else {
      acc = at::minimum(acc, x);
    }
  }
  return acc.to(dtype);
}

std::string str(const at::Tensor& t) {
  std::ostringstream s;
  s << t.scalar_type() << " " << t.sizes();
  return s.str();
}

bool same(const at::Tensor& got, const at::Tensor& want) {
  return got.scalar_type() == want.scalar_type() && got.sizes() == want.sizes() &&
         at::equal(got, want);
}

class GlooCollectives : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(GlooCollectives, EveryCollectiveMatchesADirectComputationOnEveryAxis) {
  const at::ScalarType dtype = GetParam();
  ParallelTopology topo(2, 2, 2);
  GroupOptions options;
  options.timeout = std::chrono::seconds(20);
  auto run = run_thread_ranks(
      topo, options, [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::world}) {
          Communicator& c = g.get(axis);
          const std::vector<int> ranks = topo.group_ranks(rank, axis);
          const std::string where = std::string(to_string(axis)) + " ";
          const at::Tensor x = input_of(rank, axis, dtype);
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
            at::Tensor got = c.all_reduce(x, op);
            expect(same(got, direct_reduce(ranks, axis, dtype, op)),
                   where + "all_reduce " + std::string(to_string(op)) + " got " + str(got));
          }
          for (std::int64_t dim : {0, 1}) {
            std::vector<at::Tensor> parts;
            for (int r : ranks) parts.push_back(input_of(r, axis, dtype));
            at::Tensor got = c.all_gather(x, dim);
            expect(same(got, at::cat(parts, dim)),
                   where + "all_gather dim " + std::to_string(dim) + " got " + str(got));
          }
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
            for (std::int64_t dim : {0, 1}) {
              const at::Tensor full = direct_reduce(ranks, axis, dtype, op);
              const std::int64_t chunk = full.size(dim) / c.size();
              at::Tensor want = full.narrow(dim, c.rank() * chunk, chunk);
              at::Tensor got = c.reduce_scatter(x, dim, op);
              expect(same(got, want), where + "reduce_scatter " + std::string(to_string(op)) +
                                          " dim " + std::to_string(dim) + " got " + str(got));
            }
          }
          const int root = c.size() - 1;
          at::Tensor got = c.broadcast(x, root);
          expect(same(got, input_of(ranks[root], axis, dtype)),
                 where + "broadcast got " + str(got));
          c.barrier();
          // The input is never written to.
          expect(same(x, input_of(rank, axis, dtype)), where + "input was modified");
        }
      });
  EXPECT_EQ(run.report(), "");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GlooCollectives,
                         ::testing::Values(at::kFloat, at::kDouble, at::kBFloat16),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

TEST(GlooRuntime, EachRanksGroupsHoldTheRightGlobalRanks) {
  at::set_num_threads(1);
  ParallelTopology topo(2, 2, 2);
  auto run = run_thread_ranks(
      topo, GroupOptions{},
      [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::world}) {
          Communicator& c = g.get(axis);
          const auto want = topo.group_ranks(rank, axis);
          expect(c.axis() == axis, "axis");
          expect(c.global_ranks() == want, std::string(to_string(axis)) + " ranks");
          expect(c.global_ranks()[c.rank()] == rank, "rank in group");
          // The groups really connect those ranks: gather every member's global rank.
          at::Tensor ids = c.all_gather(at::full({1}, rank, at::kLong), 0);
          expect(std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(),
                                           ids.data_ptr<std::int64_t>() + ids.numel()) ==
                     std::vector<std::int64_t>(want.begin(), want.end()),
                 std::string(to_string(axis)) + " gathered ranks");
        }
      });
  EXPECT_EQ(run.report(), "");
  // Rank 5 = (tp=1, cp=0, dp=1).
  EXPECT_EQ(topo.group_ranks(5, Axis::tp), (std::vector<int>{4, 5}));
  EXPECT_EQ(topo.group_ranks(5, Axis::cp), (std::vector<int>{5, 7}));
  EXPECT_EQ(topo.group_ranks(5, Axis::dp), (std::vector<int>{1, 5}));
}

TEST(GlooRuntime, FingerprintsCatchADifferentOpNamingBothRanksWithoutHanging) {
  at::set_num_threads(1);
  ParallelTopology topo(2, 2, 2);
  GroupOptions options;
  // A hang would end in CollectiveTimeout, not CollectiveMismatch: the error
  // kind says it did not hang (no wall-clock bound needed).
  options.timeout = std::chrono::seconds(60);
  options.communicator.check_collectives = true;
  auto run = run_thread_ranks(
      topo, options, [&](int rank, RankGroups& g, RankStatus&, Expect&, RankOutcome&) {
        g.tp->all_reduce(at::ones({4}), ReduceOp::sum);  // #0 agrees everywhere
        if (g.tp->rank() == 0)
          g.tp->all_reduce(at::ones({4}), ReduceOp::sum);
        else
          g.tp->all_gather(at::ones({4}), 0);
      });
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(run.outcomes[r].error_kind, "CollectiveMismatch") << run.report();
    const int first = r & ~1;
    EXPECT_EQ(run.outcomes[r].error,
              "collective mismatch on tp group [" + std::to_string(first) + ", " +
                  std::to_string(first + 1) + "]: rank " + std::to_string(first) +
                  " called all_reduce(sum) on tp, float32 [4], #1 but rank " +
                  std::to_string(first + 1) + " called all_gather(dim 0) on tp, float32 [4], #1");
  }
}

TEST(GlooRuntime, FingerprintsCatchTheSameOpWithDifferentShapes) {
  at::set_num_threads(1);
  ParallelTopology topo(2, 2, 2);
  GroupOptions options;
  options.timeout = std::chrono::seconds(10);
  options.communicator.check_collectives = true;
  auto run = run_thread_ranks(
      topo, options, [&](int rank, RankGroups& g, RankStatus&, Expect&, RankOutcome&) {
        // Only global rank 6 differs, on the world group.
        g.world->all_reduce(at::ones({rank == 6 ? 5 : 4, 2}, at::kDouble), ReduceOp::max);
      });
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(run.outcomes[r].error_kind, "CollectiveMismatch") << run.report();
    EXPECT_EQ(run.outcomes[r].error,
              "collective mismatch on world group [0, 1, 2, 3, 4, 5, 6, 7]: rank 0 called "
              "all_reduce(max) on world, float64 [4, 2], #0 but rank 6 called all_reduce(max) "
              "on world, float64 [5, 2], #0");
  }
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A rank that never calls the collective its peers wait in (hang-rank: it
// stops at its fault point, before the call). Each peer fails either with its
// own timeout or with "Connection closed by peer": when Gloo's timeout fires
// on one peer it closes every connection of that peer's group, so a peer that
// entered the call later than a neighbour (the scheduler's choice, more so
// under load) sees the neighbour's sockets close before its own timeout fires.
// What holds whichever it saw: every peer fails with a collective error naming
// the call, none before a timeout could have fired (a lower bound only), and
// the report names the missing rank as the culprit.
TEST(GlooRuntime, AMissingRankFailsTheOthersWithinTheTimeout) {
  constexpr int kMissing = 3;
  constexpr double kTimeout = 2.0;
  struct Calls {
    std::mutex mutex;
    std::vector<double> started = std::vector<double>(8, -1);
    std::vector<double> failed = std::vector<double>(8, -1);
    std::vector<std::string> kinds = std::vector<std::string>(8);
    std::vector<std::string> errors = std::vector<std::string>(8);
  };
  auto calls = std::make_shared<Calls>();
  register_rank_program("test-missing-rank", [calls](RankContext& ctx) {
    {
      const std::lock_guard<std::mutex> lock(calls->mutex);
      calls->started[ctx.rank] = steady_seconds();
    }
    ctx.fault_point("before the world all_reduce");
    try {
      ctx.group(Axis::world).all_reduce(at::ones({16}), ReduceOp::sum);
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> lock(calls->mutex);
      calls->failed[ctx.rank] = steady_seconds();
      calls->kinds[ctx.rank] = testing::kind_of(e);
      calls->errors[ctx.rank] = e.what();
      throw;
    }
    return nlohmann::json::object();
  });
  LaunchSpec spec;
  spec.tp = spec.cp = spec.dp = 2;
  spec.timeout_seconds = kTimeout;
  spec.transport = "gloo";
  spec.faults = {"hang-rank=" + std::to_string(kMissing)};
  const LaunchResult run = launch(spec, "test-missing-rank", nlohmann::json::object());
  ASSERT_FALSE(run.ok());
  const FailureReport& report = *run.failure;
  ASSERT_EQ(report.ranks.size(), 8u) << report.text();
  EXPECT_EQ(report.ranks.front().rank, kMissing) << report.text();
  EXPECT_FALSE(report.ranks.front().victim) << report.text();
  EXPECT_EQ(report.headline().rfind("run failed: rank 3 ", 0), 0u) << report.text();
  for (std::size_t i = 1; i < report.ranks.size(); ++i) {
    const RankFailure& f = report.ranks[i];
    EXPECT_TRUE(f.victim && f.kind == RankFailureKind::threw && f.in_collective)
        << format_rank_failure(f);
  }
  // Every trigger of a failure (a Gloo timeout, the hang guard on the missing
  // rank) fires at least the timeout after some rank started its program.
  // The progress clock counts whole milliseconds, hence the small slack.
  const std::lock_guard<std::mutex> lock(calls->mutex);
  const double first_start = *std::min_element(calls->started.begin(), calls->started.end());
  ASSERT_GE(first_start, 0) << "a rank did not start its program";
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    if (r == kMissing) {
      EXPECT_EQ(calls->failed[r], -1) << "the missing rank called the collective";
      continue;
    }
    EXPECT_TRUE(calls->kinds[r] == "CollectiveTimeout" || calls->kinds[r] == "CollectiveError")
        << calls->kinds[r] << ": " << calls->errors[r];
    EXPECT_NE(calls->errors[r].find("all_reduce(sum) on world, float32 [16], #0"),
              std::string::npos)
        << calls->errors[r];
    EXPECT_GE(calls->failed[r] - first_start, kTimeout - 0.01)
        << "failed before any timeout could fire: " << calls->errors[r];
  }
}

TEST(GlooRuntime, AMemberThatNeverJoinsFailsGroupCreationWithinTheTimeout) {
  auto rdv = Rendezvous::in_process(std::chrono::milliseconds(1000));
  std::string kind, message;
  try {
    auto factory = make_transport_factory("gloo");
    factory->create(*rdv, "tp.cp0.dp0", 0, 2, std::chrono::milliseconds(1000));
  } catch (const std::exception& e) {
    kind = testing::kind_of(e);
    message = e.what();
  }
  EXPECT_EQ(kind, "RendezvousError") << message;
  EXPECT_EQ(
      message.rfind("cannot create Gloo group tp.cp0.dp0 (rank 0 of 2, timeout 1000 ms): ", 0), 0u)
      << message;
}

TEST(GlooRuntime, SequenceNumbersAndLastCollectiveFollowTheCalls) {
  at::set_num_threads(1);
  ParallelTopology topo(2, 2, 2);
  GroupOptions options;
  options.communicator.check_collectives = true;  // the exchange does not count as a call
  auto run = run_thread_ranks(
      topo, options,
      [&](int rank, RankGroups& g, RankStatus& status, Expect& expect, RankOutcome&) {
        expect(status.last_collective().empty(), "no collective yet");
        g.tp->all_reduce(at::ones({2, 3}), ReduceOp::sum);
        expect(status.last_collective() == "all_reduce(sum) on tp, float32 [2, 3], #0",
               "after tp all_reduce: " + status.last_collective());
        g.tp->all_gather(at::ones({3}, at::kDouble), 0);
        g.cp->barrier();
        g.world->broadcast(at::ones({1}, at::kLong), 2);
        g.tp->reduce_scatter(at::ones({4, 2}), 0, ReduceOp::max);
        expect(g.tp->calls_issued() == 3, "tp calls " + std::to_string(g.tp->calls_issued()));
        expect(g.cp->calls_issued() == 1, "cp calls");
        expect(g.dp->calls_issued() == 0, "dp calls");
        expect(g.world->calls_issued() == 1, "world calls");
        expect(status.last_collective() == "reduce_scatter(max, dim 0) on tp, float32 [4, 2], #2",
               "last: " + status.last_collective());
        expect(status.state() == RankState::running, "state after leaving");
      });
  EXPECT_EQ(run.report(), "");
}

TEST(GlooRuntime, FileStoreRendezvousConnectsTwoRanks) {
  at::set_num_threads(1);
  const files::TempDir dir("parity-filestore");
  const std::string path = dir.path() + "/store";
  ParallelTopology topo(2, 1, 1);
  GroupOptions options;
  options.timeout = std::chrono::seconds(10);
  // Each rank opens the file itself, as process ranks do.
  std::vector<std::string> errors(2);
  std::vector<std::string> failures(2);
  std::vector<std::thread> threads;
  auto factory = make_transport_factory("gloo");
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);
      try {
        auto rdv = Rendezvous::file(path, 2, std::chrono::seconds(10));
        if (rdv->describe() != "FileStore " + path) failures[r] += "describe " + rdv->describe();
        RankStatusRecord record{};
        RankStatus status(&record);
        RankGroups g = make_rank_groups(topo, r, *rdv, *factory, &status, options);
        at::Tensor sum = g.tp->all_reduce(at::full({3}, r + 1.0), ReduceOp::sum);
        if (!at::equal(sum, at::full({3}, 3.0))) failures[r] += "all_reduce ";
        at::Tensor all = g.world->all_gather(at::full({1, 2}, double(r), at::kDouble), 0);
        if (!at::equal(all, at::tensor({0.0, 0.0, 1.0, 1.0}, at::kDouble).reshape({2, 2})))
          failures[r] += "all_gather ";
        g.world->barrier();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

TEST(GlooRuntime, TcpStoreOnAnEphemeralPortConnectsTwoRanks) {
  at::set_num_threads(1);
  auto master = Rendezvous::tcp("127.0.0.1", 0, 2, true, std::chrono::seconds(10));
  const int port = master->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(master->describe(), "TCPStore 127.0.0.1:" + std::to_string(port) + " (master)");
  ParallelTopology topo(2, 1, 1);
  GroupOptions options;
  options.timeout = std::chrono::seconds(10);
  auto factory = make_transport_factory("gloo");
  std::vector<std::string> errors(2), failures(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      at::set_num_threads(1);
      try {
        auto rdv = r == 0 ? master
                          : Rendezvous::tcp("127.0.0.1", port, 2, false, std::chrono::seconds(10));
        RankGroups g = make_rank_groups(topo, r, *rdv, *factory, nullptr, options);
        at::Tensor m = g.world->all_reduce(at::full({2}, r * 5.0), ReduceOp::max);
        if (!at::equal(m, at::full({2}, 5.0))) failures[r] = "all_reduce max";
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(failures[r], "") << "rank " << r;
  }
}

TEST(GlooRuntime, TcpStoreBindAndConnectFailuresSaySoPlainly) {
  auto master = Rendezvous::tcp("127.0.0.1", 0, 2, true, std::chrono::seconds(5));
  const std::string where = "127.0.0.1:" + std::to_string(master->port());
  try {
    Rendezvous::tcp("127.0.0.1", master->port(), 2, true, std::chrono::seconds(2));
    ADD_FAILURE() << "a second master bound " << where;
  } catch (const RendezvousError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot bind TCPStore on " + where + ": address in use");
  }
  // A port nobody listens on: bound (so no one else can take it) but never
  // listened on, so a connect is refused.
  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int free_port = ntohs(addr.sin_port);
  try {
    Rendezvous::tcp("127.0.0.1", free_port, 2, false, std::chrono::milliseconds(800));
    ADD_FAILURE() << "connected to a closed port";
  } catch (const RendezvousError& e) {
    const std::string m = e.what();
    EXPECT_EQ(
        m.rfind("cannot connect to TCPStore on 127.0.0.1:" + std::to_string(free_port) + ": ", 0),
        0u)
        << m;
  }
  ::close(held);
}

TEST(GlooRuntime, SixteenRanksCreateTheirGroups) {
  at::set_num_threads(1);
  ParallelTopology topo(2, 2, 4);
  GroupOptions options;
  options.timeout = std::chrono::seconds(30);
  auto run = run_thread_ranks(
      topo, options, [&](int rank, RankGroups& g, RankStatus&, Expect& expect, RankOutcome&) {
        at::Tensor s = g.world->all_reduce(at::ones({1}), ReduceOp::sum);
        expect(s.item<float>() == 16.0f, "world sum");
      });
  EXPECT_EQ(run.report(), "");
  ::testing::Test::RecordProperty("group_setup_ms", std::to_string(int(run.setup_seconds * 1000)));
  std::cout << "[ parity   ] 16 thread ranks (tp2 cp2 dp4): groups created in " << run.setup_seconds
            << " s (slowest rank), whole run " << run.total_seconds << " s\n";
}

}  // namespace
}  // namespace parity
