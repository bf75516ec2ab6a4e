// Communicator bookkeeping without a network: descriptions, RankStatus, size-1
// groups, argument validation, error wrapping (a fake transport).
#include <gtest/gtest.h>

#include <cstring>

#include <ATen/ATen.h>

#include <atomic>
#include <optional>
#include <thread>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/execution_point.h"
#include "harness/parallel/all_to_all.h"
#include "harness/parallel/collective.h"
#include "harness/parallel/communicator.h"
#include "harness/parallel/errors.h"
#include "harness/parallel/process_groups.h"
#include "harness/parallel/rank_status.h"
#include "harness/parallel/rendezvous.h"

PARITY_USES_FAULT(asymmetric_collective);

namespace parity {
namespace {

TEST(CollectiveCall, DescribeNamesOpAxisDtypeShapeAndSequence) {
  CollectiveCall c;
  c.op = CollectiveOp::all_reduce;
  c.reduce = ReduceOp::sum;
  c.axis = Axis::tp;
  c.dtype = static_cast<std::int8_t>(at::kFloat);
  c.shape = {2, 3};
  c.sequence = 4;
  EXPECT_EQ(c.describe(), "all_reduce(sum) on tp, float32 [2, 3], #4");
  c.op = CollectiveOp::all_gather;
  c.dim = 1;
  c.dtype = static_cast<std::int8_t>(at::kBFloat16);
  EXPECT_EQ(c.describe(), "all_gather(dim 1) on tp, bfloat16 [2, 3], #4");
  c.op = CollectiveOp::reduce_scatter;
  c.reduce = ReduceOp::min;
  c.axis = Axis::dp;
  c.dtype = static_cast<std::int8_t>(at::kDouble);
  EXPECT_EQ(c.describe(), "reduce_scatter(min, dim 1) on dp, float64 [2, 3], #4");
  c.op = CollectiveOp::broadcast;
  c.shape = {};
  c.dtype = static_cast<std::int8_t>(at::kLong);
  EXPECT_EQ(c.describe(), "broadcast(root 1) on dp, int64 [], #4");
  CollectiveCall b;
  b.axis = Axis::world;
  b.sequence = 9;
  EXPECT_EQ(b.describe(), "barrier on world, #9");
  EXPECT_TRUE(b.same_call(b));
  CollectiveCall b2 = b;
  b2.sequence = 10;
  EXPECT_FALSE(b.same_call(b2));
  c.op = CollectiveOp::all_to_all_counts;
  c.axis = Axis::ep;
  c.shape = {4};
  EXPECT_EQ(c.describe(), "all_to_all_counts on ep, int64 [4], #4");
  c.op = CollectiveOp::all_to_all;
  c.dtype = static_cast<std::int8_t>(at::kFloat);
  c.shape = {4, 3, 2};
  EXPECT_EQ(c.describe(), "all_to_all on ep, float32 [4, 3, 2], #4");
  EXPECT_EQ(to_string(CollectiveOp::reduce_scatter), "reduce_scatter");
  EXPECT_EQ(to_string(ReduceOp::max), "max");
  EXPECT_EQ(to_string(RankState::in_collective), "in_collective");
}

TEST(RankStatus, RecordsStateLastCollectiveErrorAndProgress) {
  RankStatusRecord record{};
  RankStatus::reset(&record, 3);
  RankStatus s(&record);
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.state(), RankState::starting);
  EXPECT_EQ(s.last_collective(), "");
  EXPECT_EQ(s.error(), "");
  const auto before = s.progress_ms();
  EXPECT_LE(before, RankStatus::now_ms());
  CollectiveCall c;
  c.axis = Axis::cp;
  c.sequence = 2;
  s.enter_collective(c);
  EXPECT_EQ(s.state(), RankState::in_collective);
  EXPECT_EQ(s.last_collective(), "barrier on cp, #2");
  EXPECT_GE(s.progress_ms(), before);
  s.leave_collective();
  EXPECT_EQ(s.state(), RankState::running);
  EXPECT_EQ(s.last_collective(), "barrier on cp, #2");  // the last one entered stays
  s.set_error(std::string(2000, 'x'));                  // truncated, NUL-terminated
  EXPECT_EQ(s.error(), std::string(sizeof(record.error) - 1, 'x'));
  s.set_state(RankState::failed);
  EXPECT_EQ(s.state(), RankState::failed);
}

// The step loop's heartbeat: progress at the thread's execution point, and a
// no-op on a thread that runs no rank.
TEST(RankStatus, AHeartbeatRecordsProgressAndTheStepPoint) {
  RankStatusRecord record{};
  RankStatus s(&record);
  EXPECT_EQ(s.last_step_point().pass, StepPass::none);  // a zero-filled record: no beat yet
  RankStatus::reset(&record, 0);
  EXPECT_EQ(s.last_step_point().pass, StepPass::none);
  step_heartbeat(StepPass::forward, 4);  // no rank status on this thread
  EXPECT_EQ(s.last_step_point().pass, StepPass::none);
  record.progress_ms.store(0);
  {
    RankStatusScope rank(&s);
    ExecutionPointScope point(ExecutionPoint{2, 5, GraphPhase::eager});
    step_heartbeat(StepPass::backward, 1);
  }
  EXPECT_GT(s.progress_ms(), 0);
  const StepPoint p = s.last_step_point();
  EXPECT_EQ(p.step, 2);
  EXPECT_EQ(p.microbatch, 5);
  EXPECT_EQ(p.layer, 1);
  EXPECT_EQ(describe(p), "step 2, microbatch 5, layer 1 (backward)");
  EXPECT_EQ(describe(StepPoint{3, -1, -1, StepPass::forward}), "step 3 (forward)");
  EXPECT_EQ(describe(StepPoint{}), "");
}

// The launcher's start-up barrier: ranks that arrive apart all pass once the
// last arrives (polling meanwhile); a rank that never arrives is named.
TEST(Rendezvous, TheStartUpBarrierWaitsForLateRanksAndNamesMissingOnes) {
  const std::shared_ptr<Rendezvous> rdv = Rendezvous::in_process(std::chrono::seconds(5));
  std::atomic<int> polls{0};
  std::string late_error;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    try {
      rdv->wait_for_every_rank("started", 1, 2, std::chrono::seconds(60), {});
    } catch (const std::exception& e) {
      late_error = e.what();
    }
  });
  rdv->wait_for_every_rank("started", 0, 2, std::chrono::seconds(60), [&] { ++polls; });
  late.join();
  EXPECT_EQ(late_error, "");
  EXPECT_GT(polls.load(), 0);  // rank 0 waited for rank 1, polling

  try {
    rdv->wait_for_every_rank("again", 2, 4, std::chrono::milliseconds(100), {});
    ADD_FAILURE() << "no rank arrived, yet the barrier passed";
  } catch (const RendezvousError& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank(s) 0, 1, 3 of 4 did not reach the rendezvous (in-process HashStore) within "
              "100 ms");
  }
}

// The seqlock's protocol, step by step: a stress test with a racing writer
// passed whether or not the race happened to hit; these do not depend on it.
TEST(RankStatus, AGraphCaptureMarksTheRankCapturingUntilItEnds) {
  RankStatusRecord record{};
  RankStatus status(&record);
  RankStatus::reset(&record, 3);
  status.set_state(RankState::running);
  {
    GraphCaptureScope no_rank;  // no rank status on this thread: nothing changes
    EXPECT_EQ(status.state(), RankState::running);
  }
  EXPECT_EQ(rank_status_of_this_thread(), nullptr);
  {
    RankStatusScope rank(&status);
    EXPECT_EQ(rank_status_of_this_thread(), &status);
    {
      GraphCaptureScope capture;
      EXPECT_EQ(status.state(), RankState::capturing);
      EXPECT_EQ(to_string(status.state()), "capturing");
    }
    EXPECT_EQ(status.state(), RankState::running);
    {
      GraphCaptureScope capture;
      status.set_state(RankState::failed);  // the capture failed: that state stays
    }
    EXPECT_EQ(status.state(), RankState::failed);
  }
  EXPECT_EQ(rank_status_of_this_thread(), nullptr);
}

TEST(RankStatus, EveryWriteLeavesTheVersionEvenAndAdvanced) {
  RankStatusRecord record{};
  RankStatus status(&record);
  for (std::uint32_t i = 1; i <= 3; ++i) {
    status.set_error(std::string(i * 50, 'e'));
    EXPECT_EQ(record.version.load(), 2 * i);
    EXPECT_EQ(status.error(), std::string(i * 50, 'e'));
  }
}

TEST(RankStatus, AWriterThatDiedMidWriteDoesNotBlockReaders) {
  RankStatusRecord record{};
  RankStatus status(&record);
  status.set_error("first");
  record.version.store(5);                               // odd forever: the writer crashed
  std::memset(record.error, 'x', sizeof(record.error));  // not even NUL-terminated
  const std::string e = status.error();
  EXPECT_EQ(e, std::string(sizeof(record.error) - 1, 'x'));
}

// A transport that plays a group of `size` where every other rank holds the
// same data, and can be told to fail.
class FakeTransport : public CollectiveTransport {
 public:
  FakeTransport(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  at::Tensor all_reduce(const at::Tensor& x, ReduceOp op) override {
    fail_if_told();
    return op == ReduceOp::sum ? x * size_ : x.clone();
  }
  at::Tensor all_gather(const at::Tensor& x, std::int64_t dim) override {
    ++gathers;
    fail_if_told();
    return at::cat(std::vector<at::Tensor>(size_, x), dim);
  }
  at::Tensor reduce_scatter(const at::Tensor& x, std::int64_t dim, ReduceOp op) override {
    fail_if_told();
    return x.chunk(size_, dim)[rank_] * (op == ReduceOp::sum ? size_ : 1);
  }
  at::Tensor broadcast(const at::Tensor& x, int) override {
    fail_if_told();
    return x.clone();
  }
  void barrier() override { fail_if_told(); }

  int fail = 0;  // 1: runtime_error, 2: CollectiveTimeout
  int gathers = 0;

 private:
  void fail_if_told() {
    if (fail == 1) throw std::runtime_error("peer went away");
    if (fail == 2) throw CollectiveTimeout("gloo all_reduce on tp timed out after 1000 ms");
  }
  int rank_, size_;
};

TEST(Communicator, SizeOneGroupsNeedNoTransportAndReturnNewTensors) {
  RankStatusRecord record{};
  RankStatus status(&record);
  CommunicatorOptions opts;
  opts.check_collectives = true;  // nothing to compare with in a group of one
  Communicator c(Axis::cp, {5}, 0, nullptr, &status, opts);
  at::Tensor x = at::arange(6, at::kFloat).reshape({2, 3});
  for (at::Tensor y : {c.all_reduce(x, ReduceOp::sum), c.all_gather(x, 1),
                       c.reduce_scatter(x, 0, ReduceOp::max), c.broadcast(x, 0)}) {
    EXPECT_TRUE(at::equal(y, x));
    EXPECT_NE(y.data_ptr(), x.data_ptr());
  }
  c.barrier();
  EXPECT_EQ(c.calls_issued(), 5);
  EXPECT_EQ(status.last_collective(), "barrier on cp, #4");
  EXPECT_EQ(c.group_label(), "cp group [5]");
}

TEST(Communicator, AllToAllInAGroupOfOneKeepsEveryRowAndIssuesTwoCalls) {
  RankStatusRecord record{};
  RankStatus status(&record);
  Communicator c(Axis::ep, {3}, 0, nullptr, &status, {});
  const at::Tensor x = at::arange(10, at::kFloat).reshape({5, 2});
  const AllToAllResult r = c.all_to_all(x, {5});
  EXPECT_TRUE(at::equal(r.output, x));
  EXPECT_NE(r.output.data_ptr(), x.data_ptr());
  EXPECT_EQ(r.recv_counts, (std::vector<std::int64_t>{5}));
  EXPECT_EQ(c.calls_issued(), 2);
  EXPECT_EQ(status.last_collective(), "all_to_all on ep, float32 [1, 5, 2], #1");
}

// The fake plays a group whose other ranks send exactly what this one sends:
// rank 1 of 3 then receives its own chunk for rank 1 from every rank.
TEST(Communicator, AllToAllPadsToTheLargestChunkAndKeepsTheRowsAddressedHere) {
  auto t = std::make_unique<FakeTransport>(1, 3);
  FakeTransport* fake = t.get();
  RankStatusRecord record{};
  RankStatus status(&record);
  Communicator c(Axis::ep, {4, 5, 6}, 1, std::move(t), &status, {});
  const at::Tensor x = at::arange(12, at::kDouble).reshape({6, 2});  // 1 row, 2 rows, 3 rows
  const AllToAllResult r = c.all_to_all(x, {1, 2, 3});
  const at::Tensor mine = x.narrow(0, 1, 2);
  EXPECT_TRUE(at::equal(r.output, at::cat({mine, mine, mine}, 0))) << r.output;
  EXPECT_EQ(r.recv_counts, (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_EQ(fake->gathers, 2);  // the counts, then the default all_to_all's gather
  // Every rank's chunks padded to the largest (3 rows): the same shape everywhere.
  EXPECT_EQ(status.last_collective(), "all_to_all on ep, float64 [3, 3, 2], #1");
  // No rank sends anything: the counts still travel, the data does not.
  const AllToAllResult none = c.all_to_all(at::empty({0, 2}, at::kDouble), {0, 0, 0});
  EXPECT_EQ(none.output.sizes(), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(none.recv_counts, (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(fake->gathers, 3);
  EXPECT_EQ(c.calls_issued(), 4);
}

TEST(Communicator, AllToAllRejectsCountsThatDoNotDescribeTheInput) {
  auto t = std::make_unique<FakeTransport>(0, 2);
  FakeTransport* fake = t.get();
  Communicator c(Axis::ep, {0, 1}, 0, std::move(t), nullptr, {});
  const at::Tensor x = at::ones({5, 2});
  try {
    c.all_to_all(x, {2, 2});
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "all_to_all on ep, float32 [5, 2], #0 on ep group [0, 1]: send counts sum to 4 "
              "but the input has 5 rows");
  }
  EXPECT_THROW(c.all_to_all(x, {5}), std::invalid_argument);      // one count per rank
  EXPECT_THROW(c.all_to_all(x, {6, -1}), std::invalid_argument);  // none negative
  EXPECT_THROW(c.all_to_all(at::ones({}), {0, 0}), std::invalid_argument);
  EXPECT_THROW(c.all_to_all(at::Tensor(), {0, 0}), std::invalid_argument);
  EXPECT_EQ(c.calls_issued(), 0);
  EXPECT_EQ(fake->gathers, 0);
}

TEST(AllToAllCounts, ReadsTheGatheredMatrixBySourceThenDestination) {
  // rank 0 sends {0, 3}, rank 1 sends {1, 0}.
  const AllToAllCounts counts(2, at::tensor(std::vector<std::int64_t>{0, 3, 1, 0}));
  EXPECT_EQ(counts.sent(0, 1), 3);
  EXPECT_EQ(counts.received_by(0), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(counts.received_by(1), (std::vector<std::int64_t>{3, 0}));
  EXPECT_EQ(counts.max_chunk(), 3);
  EXPECT_THROW(AllToAllCounts(3, at::zeros({4}, at::kLong)), std::logic_error);
  const at::Tensor x = at::arange(4, at::kFloat).reshape({2, 2});
  const at::Tensor padded = pad_chunks(x, {0, 2}, 3);
  EXPECT_EQ(padded.sizes(), (std::vector<std::int64_t>{2, 3, 2}));
  EXPECT_TRUE(at::equal(padded[1].narrow(0, 0, 2), x));
  EXPECT_EQ(padded.abs().sum().item<float>(), x.sum().item<float>());  // zeros elsewhere
  EXPECT_TRUE(at::equal(unpad_chunks(padded, {0, 2}), x));
}

TEST(Communicator, ResultsCarryNoAutogradHistory) {
  Communicator c(Axis::tp, {0}, 0, nullptr, nullptr, {});
  at::Tensor x = at::ones({3}).set_requires_grad(true);
  EXPECT_FALSE(c.all_reduce(x, ReduceOp::sum).requires_grad());
}

TEST(Communicator, ABadArgumentThrowsNamingTheCallAndSendsNothing) {
  auto t = std::make_unique<FakeTransport>(0, 2);
  FakeTransport* fake = t.get();
  CommunicatorOptions opts;
  opts.check_collectives = true;
  Communicator c(Axis::tp, {0, 1}, 0, std::move(t), nullptr, opts);
  try {
    c.reduce_scatter(at::ones({5, 2}), 0, ReduceOp::sum);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "reduce_scatter(sum, dim 0) on tp, float32 [5, 2], #0 on tp group [0, 1]: size 5 "
              "of dim 0 is not divisible by the group size 2");
  }
  EXPECT_THROW(c.all_gather(at::ones({2}), 1), std::invalid_argument);
  EXPECT_THROW(c.broadcast(at::ones({2}), 2), std::invalid_argument);
  EXPECT_THROW(c.all_reduce(at::Tensor(), ReduceOp::sum), std::invalid_argument);
  EXPECT_EQ(c.calls_issued(), 0);
  EXPECT_EQ(fake->gathers, 0);
  // Negative dims are normalized (and the fingerprint exchange ran once).
  EXPECT_EQ(c.all_gather(at::ones({2, 3}), -1).sizes(), (std::vector<std::int64_t>{2, 6}));
  EXPECT_EQ(fake->gathers, 2);
  EXPECT_EQ(c.reduce_scatter(at::ones({2, 4}), -1, ReduceOp::sum).sizes(),
            (std::vector<std::int64_t>{2, 2}));
}

TEST(Communicator, TransportFailuresAreRethrownWithTheCall) {
  auto t = std::make_unique<FakeTransport>(1, 2);
  FakeTransport* fake = t.get();
  RankStatusRecord record{};
  RankStatus status(&record);
  Communicator c(Axis::tp, {6, 7}, 1, std::move(t), &status, {});
  c.barrier();
  fake->fail = 1;
  try {
    c.all_reduce(at::ones({4}), ReduceOp::sum);
    ADD_FAILURE() << "no exception";
  } catch (const CollectiveTimeout&) {
    ADD_FAILURE() << "not a timeout";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(std::string(e.what()),
              "peer went away (in all_reduce(sum) on tp, float32 [4], #1, tp group [6, 7], "
              "global rank 7)");
  }
  EXPECT_EQ(status.state(), RankState::in_collective);
  EXPECT_EQ(status.last_collective(), "all_reduce(sum) on tp, float32 [4], #1");
  fake->fail = 2;
  EXPECT_THROW(c.all_gather(at::ones({4}), 0), CollectiveTimeout);
  EXPECT_EQ(c.calls_issued(), 3);
}

// asymmetric-collective: the last rank of a group of more than one records a
// barrier its peers do not issue (no data moves); other ranks and groups of one
// are unchanged.
TEST(Communicator, AsymmetricCollectiveFaultChangesOnlyTheLastRanksSequence) {
  auto issue = [](int rank, int size, bool fault) {
    std::optional<CodePathFaultScope> on;
    if (fault) on.emplace(fault_asymmetric_collective);
    std::unique_ptr<CollectiveTransport> t;
    if (size > 1) t = std::make_unique<FakeTransport>(rank, size);
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    Communicator c(Axis::dp, ranks, rank, std::move(t), nullptr, {});
    c.all_reduce(at::ones({2}), ReduceOp::sum);
    c.all_gather(at::ones({2}), 0);
    return std::make_pair(c.calls_issued(), c.call_hash());
  };
  const auto peer = issue(0, 2, false);
  EXPECT_EQ(issue(1, 2, false), peer);
  EXPECT_EQ(issue(0, 2, true), peer);
  const auto last = issue(1, 2, true);
  EXPECT_EQ(last.first, peer.first + 1);
  EXPECT_NE(last.second, peer.second);
  EXPECT_EQ(issue(0, 1, true), issue(0, 1, false));
}

TEST(Communicator, ConstructionChecksTheGroup) {
  EXPECT_THROW(Communicator(Axis::tp, {0, 1}, 0, nullptr, nullptr, {}), std::invalid_argument);
  EXPECT_THROW(
      Communicator(Axis::tp, {0, 1}, 2, std::make_unique<FakeTransport>(0, 2), nullptr, {}),
      std::invalid_argument);
  EXPECT_THROW(
      Communicator(Axis::tp, {0, 1}, 0, std::make_unique<FakeTransport>(1, 2), nullptr, {}),
      std::invalid_argument);
}

class NeverCalledFactory : public TransportFactory {
 public:
  std::unique_ptr<CollectiveTransport> create(const Rendezvous&, const std::string& name, int, int,
                                              std::chrono::milliseconds) override {
    throw std::logic_error("transport requested for " + name);
  }
};

TEST(ProcessGroups, AWorldOfOneBuildsFiveGroupsWithoutTransports) {
  auto rdv = Rendezvous::in_process();
  EXPECT_EQ(rdv->describe(), "in-process HashStore");
  EXPECT_EQ(rdv->port(), -1);
  NeverCalledFactory factory;
  RankGroups g = make_rank_groups(ParallelTopology(1, 1, 1), 0, *rdv, factory, nullptr, {});
  for (Axis axis : {Axis::tp, Axis::cp, Axis::dp, Axis::ep, Axis::world}) {
    EXPECT_EQ(g.get(axis).size(), 1);
    EXPECT_EQ(g.get(axis).axis(), axis);
    EXPECT_TRUE(at::equal(g.get(axis).all_reduce(at::ones({2}), ReduceOp::max), at::ones({2})));
  }
}

TEST(ProcessGroups, UnknownTransportNamesTheKnownOnes) {
  EXPECT_NO_THROW(make_transport_factory("gloo"));
  try {
    make_transport_factory("carrier-pigeon");
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown transport 'carrier-pigeon' (known: "),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gloo"), std::string::npos);
  }
}

}  // namespace
}  // namespace parity
