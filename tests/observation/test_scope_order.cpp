// Per-thread scopes destroyed out of order (harness/observation/scope_order.h):
// each scope kind aborts with a message naming itself, instead of restoring a
// pointer into a scope that is already gone.
#include <gtest/gtest.h>

#include <memory>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/thread_context.h"
#include "harness/recompute/checkpoint.h"

PARITY_USES_FAULT(mean_of_means);
PARITY_USES_FAULT(sqrt_before_sum);

namespace parity {
namespace {

TensorObservationCallback ignore() {
  return [](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&, OptionalDim,
            OptionalDim, OptionalDim) {};
}

// Opens the scope `make_first` makes, then `make_second`'s, then ends the
// first while the second is alive. (Makers, not arguments: argument evaluation
// order is unspecified.)
template <class MakeFirst, class MakeSecond>
void end_outer_first(MakeFirst make_first, MakeSecond make_second) {
  auto first = make_first();
  auto second = make_second();
  first.reset();
  second.reset();
}

class ScopeOrderDeathTest : public ::testing::Test {
 protected:
  // The test binary runs threads (ATen's pools): fork-and-re-exec is the safe style.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(ScopeOrderDeathTest, CaptureEndedBeforeAnInnerCaptureAborts) {
  EXPECT_DEATH(
      end_outer_first(
          [&] { return std::make_unique<TensorObservationCapture>(ignore(), KindSet::all()); },
          [&] { return std::make_unique<TensorObservationCapture>(ignore(), KindSet::all()); }),
      "TensorObservationCapture destroyed out of order");
}

TEST_F(ScopeOrderDeathTest, SuspensionEndedBeforeAnInnerSuspensionAborts) {
  EXPECT_DEATH(end_outer_first([&] { return std::make_unique<TensorObservationSuspension>(); },
                               [&] { return std::make_unique<TensorObservationSuspension>(); }),
               "TensorObservationSuspension destroyed out of order");
}

TEST_F(ScopeOrderDeathTest, ExecutionPointScopeEndedBeforeAPhaseScopeAborts) {
  EXPECT_DEATH(end_outer_first(
                   [&] {
                     return std::make_unique<ExecutionPointScope>(ExecutionPoint{1, 0});
                   },
                   [&] { return std::make_unique<GraphPhaseScope>(GraphPhase::record); }),
               "ExecutionPointScope destroyed out of order");
}

TEST_F(ScopeOrderDeathTest, FaultScopeEndedBeforeAnInnerFaultScopeAborts) {
  EXPECT_DEATH(
      end_outer_first([&] { return std::make_unique<CodePathFaultScope>(fault_mean_of_means); },
                      [&] { return std::make_unique<CodePathFaultScope>(fault_sqrt_before_sum); }),
      "CodePathFaultScope destroyed out of order");
}

TEST_F(ScopeOrderDeathTest, RecomputeLogScopeEndedBeforeAnInnerOneAborts) {
  std::vector<RecomputeEvent> a, b;
  EXPECT_DEATH(end_outer_first([&] { return std::make_unique<RecomputeLogScope>(&a); },
                               [&] { return std::make_unique<RecomputeLogScope>(&b); }),
               "RecomputeLogScope destroyed out of order");
}

TEST_F(ScopeOrderDeathTest, ContextScopeEndedWithAnInnerScopeAliveAborts) {
  const ThreadContext bare;
  EXPECT_DEATH(end_outer_first([&] { return std::make_unique<ThreadContextScope>(bare); },
                               [&] { return std::make_unique<TensorObservationSuspension>(); }),
               "ThreadContextScope destroyed out of order");
}

TEST(ScopeOrder, ScopesOfDifferentKindsMayInterleave) {
  // Each kind restores its own field only, so interleaving kinds is safe and allowed.
  auto capture = std::make_unique<TensorObservationCapture>(ignore(), KindSet::all());
  auto quiet = std::make_unique<TensorObservationSuspension>();
  capture.reset();
  EXPECT_TRUE(detail::observation_state.suspended);
  EXPECT_EQ(detail::observation_state.active, nullptr);
  quiet.reset();
  EXPECT_FALSE(detail::observation_state.suspended);
  EXPECT_EQ(detail::observation_state.live_kinds, 0u);
}

}  // namespace
}  // namespace parity
