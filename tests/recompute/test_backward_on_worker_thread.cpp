// The per-thread context (harness/observation/thread_context.h) carried to a
// worker thread: a backend whose backward runs on another thread reinstalls the
// rank thread's context there, and the checkpoint's recomputation on that
// thread is then suspended, logged and fault-switched exactly as on the rank
// thread. Without an explicit reinstall the checkpoint carries its origin
// context itself (autograd's CUDA device thread is such a worker).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/thread_context.h"
#include "harness/recompute/checkpoint.h"

PARITY_USES_FAULT(missing_recompute_suspension);

namespace parity {
namespace {

struct Site : ObservationOwner {
  std::string name = "worker.site";
  const std::string& canonical_name() const override { return name; }
};

struct Outcome {
  int observations = 0;
  std::vector<RecomputeEvent> log;
  ExecutionPoint point_in_recompute;
  bool backward_ran = false;
};

// A checkpointed function with a site inside; forward here, backward on a
// worker thread (with the rank thread's context reinstalled iff `carry`).
Outcome checkpoint_with_backward_on_worker(bool carry) {
  Outcome out;
  Site site;
  auto observe = capture_tensor_observations(
      [&](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&, OptionalDim,
          OptionalDim, OptionalDim) { ++out.observations; },
      KindSet::all());
  RecomputeLogScope log(&out.log);
  ExecutionPointScope point(ExecutionPoint{3, 1, GraphPhase::eager});
  CheckpointFn fn = [&](const std::vector<at::Tensor>& in) {
    at::Tensor y = in[0].tanh();
    observe_tensor(site, "probe", SourceKind::mlp_output, y);
    if (at::GradMode::is_enabled()) out.point_in_recompute = current_execution_point();
    return std::vector<at::Tensor>{y};
  };
  at::Tensor x = at::linspace(-1.0, 1.0, 6, at::kDouble).requires_grad_(true);
  at::Tensor loss = checkpoint(fn, {x}, nullptr, "worker")[0].sum();

  const ThreadContext context = capture_thread_context();
  std::thread worker([&] {
    std::optional<ThreadContextScope> here;
    if (carry) here.emplace(context);
    loss.backward();
    out.backward_ran = x.grad().defined();
  });
  worker.join();
  return out;
}

TEST(ThreadContext, BackwardOnAWorkerThreadIsSuspendedAndLoggedWithTheReinstalledContext) {
  const Outcome o = checkpoint_with_backward_on_worker(/*carry=*/true);
  ASSERT_TRUE(o.backward_ran);
  EXPECT_EQ(o.observations, 1);  // the forward only: the recomputation is suspended
  ASSERT_EQ(o.log.size(), 2u);
  EXPECT_EQ(o.log[0].execution, RecomputeExecution::forward);
  EXPECT_TRUE(o.log[0].observations_live);
  EXPECT_EQ(o.log[1].execution, RecomputeExecution::recompute);
  EXPECT_TRUE(o.log[1].grad_enabled);
  EXPECT_FALSE(o.log[1].observations_live);
  EXPECT_EQ(o.point_in_recompute.step, 3);
  EXPECT_EQ(o.point_in_recompute.microbatch, 1);
}

TEST(ThreadContext, WithoutAnExplicitReinstallTheCheckpointCarriesItsOriginContext) {
  const Outcome o = checkpoint_with_backward_on_worker(/*carry=*/false);
  ASSERT_TRUE(o.backward_ran);
  EXPECT_EQ(o.observations, 1);  // still suspended: the rank thread's context travelled
  ASSERT_EQ(o.log.size(), 2u);   // and the recomputation is logged where the forward was
  EXPECT_EQ(o.log[1].execution, RecomputeExecution::recompute);
  EXPECT_EQ(o.point_in_recompute.step, 3);
  EXPECT_EQ(o.point_in_recompute.microbatch, 1);
}

// CheckpointWithoutOutput carries its origin context too: its recomputation, run by the hook on
// a worker thread with nothing reinstalled, is suspended and logged with the forward's step.
TEST(ThreadContext, CheckpointWithoutOutputCarriesItsOriginContextToAWorker) {
  Site site;
  int observations = 0;
  auto observe = capture_tensor_observations(
      [&](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&, OptionalDim,
          OptionalDim, OptionalDim) { ++observations; },
      KindSet::all());
  std::vector<RecomputeEvent> log;
  RecomputeLogScope logged(&log);
  ExecutionPointScope point(ExecutionPoint{3, 1, GraphPhase::eager});
  ExecutionPoint in_recompute;
  auto norm = [&](const at::Tensor& t) {
    at::Tensor y = t.tanh();
    observe_tensor(site, "probe", SourceKind::mlp_output, y);
    if (at::GradMode::is_enabled()) in_recompute = current_execution_point();
    return y;
  };
  at::Tensor x = at::linspace(-1.0, 1.0, 6, at::kDouble).requires_grad_(true);
  CheckpointWithoutOutput ckpt(nullptr, "worker");
  at::Tensor out = ckpt.checkpoint(norm, x);
  at::Tensor consumer = out * x;
  ckpt.discard_output_and_register_recompute(consumer);
  std::thread worker([&] { consumer.sum().backward(); });
  worker.join();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(observations, 1);  // the forward only
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1].execution, RecomputeExecution::recompute);
  EXPECT_EQ(in_recompute.step, 3);
  EXPECT_EQ(in_recompute.microbatch, 1);
}

TEST(ThreadContext, OriginContextScopeIsANoOpOnTheCapturingThreadAndReinstallsElsewhere) {
  ExecutionPointScope point(ExecutionPoint{5, 2, GraphPhase::eager});
  const OriginContext origin = capture_origin_context();
  {
    OriginContextScope same(origin);
    EXPECT_FALSE(same.reinstalled());
  }
  ExecutionPoint seen;
  bool reinstalled = false;
  std::thread other([&] {
    OriginContextScope there(origin);
    reinstalled = there.reinstalled();
    seen = current_execution_point();
  });
  other.join();
  EXPECT_TRUE(reinstalled);
  EXPECT_EQ(seen.step, 5);
  EXPECT_EQ(seen.microbatch, 2);
}

TEST(ThreadContext, CarriesCodePathFaultsToTheWorker) {
  // missing-recompute-suspension switched on at the rank thread: the worker's
  // recomputation is observed too (the fault bit and the observer both travelled).
  CodePathFaultScope fault(fault_missing_recompute_suspension);
  const Outcome o = checkpoint_with_backward_on_worker(/*carry=*/true);
  EXPECT_EQ(o.observations, 2);
  ASSERT_EQ(o.log.size(), 2u);
  EXPECT_TRUE(o.log[1].observations_live);
}

TEST(ThreadContext, ScopeRestoresTheWorkersOwnContext) {
  const ThreadContext empty;
  std::vector<RecomputeEvent> log;
  RecomputeLogScope here(&log);
  ExecutionPointScope point(ExecutionPoint{7, 0, GraphPhase::record});
  {
    ThreadContextScope bare(empty);
    EXPECT_EQ(current_execution_point().step, -1);
    EXPECT_EQ(detail::thread_recompute_log(), nullptr);
    EXPECT_FALSE(is_observing_tensor(SourceKind::mlp_output));
  }
  EXPECT_EQ(current_execution_point().step, 7);
  EXPECT_EQ(current_execution_point().phase, GraphPhase::record);
  EXPECT_EQ(detail::thread_recompute_log(), &log);
}

}  // namespace
}  // namespace parity
