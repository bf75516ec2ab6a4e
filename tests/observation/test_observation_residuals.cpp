// The residual helper (contract.md section 1) and the observation state across
// threads.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "harness/faults/code_path_faults.h"
#include "harness/observation/tensor_observation.h"
#include "tests/observation/observation_recorder.h"

namespace parity {
namespace {

using namespace testing;  // observation_recorder.h

// --- the residual helper ------------------------------------------------------------

struct ResidualCase {
  const char* label;
  std::optional<bool> sequence_parallel;
  bool configless;
  OptionalDim expected_tp;
};

void PrintTo(const ResidualCase& c, std::ostream* os) { *os << c.label; }

class ObservationResiduals : public ::testing::TestWithParam<ResidualCase> {};

TEST_P(ObservationResiduals, FieldsOrderAndValues) {
  const ResidualCase& p = GetParam();
  TestOwner configured("decoder.layers.3", p.sequence_parallel);
  ConfiglessOwner configless;
  const ObservationOwner& layer =
      p.configless ? static_cast<const ObservationOwner&>(configless) : configured;

  const at::Tensor accumulator = at::randn({5, 2, 4}, at::kDouble).set_requires_grad(true);
  const at::Tensor output = accumulator * 3 + at::randn({5, 2, 4}, at::kDouble);
  ASSERT_TRUE(output.requires_grad());
  const at::Tensor expected = (output - accumulator).detach();

  Recorder rec;
  {
    auto c = capture_tensor_observations(rec.callback(), KindSet::all());
    observe_layer_residuals(layer, accumulator, output);
  }
  EXPECT_TRUE(at::GradMode::is_enabled()) << "grad mode restored after the helper";
  ASSERT_EQ(rec.records.size(), 2u);

  const Record& acc = rec.records[0];
  EXPECT_EQ(acc.owner, &layer);
  EXPECT_EQ(acc.name, "residual_accumulator");
  EXPECT_EQ(acc.kind, SourceKind::residual_accumulator);
  EXPECT_EQ(acc.tensor_address, &accumulator);
  EXPECT_EQ(acc.tensor.unsafeGetTensorImpl(), accumulator.unsafeGetTensorImpl());
  EXPECT_TRUE(acc.tensor.requires_grad()) << "the accumulator is passed un-detached";
  EXPECT_EQ(acc.tp_shard_dim, p.expected_tp);
  EXPECT_EQ(acc.sequence_dim, OptionalDim(0));
  EXPECT_EQ(acc.batch_dim, OptionalDim(1));

  const Record& con = rec.records[1];
  EXPECT_EQ(con.owner, &layer);
  EXPECT_EQ(con.name, "residual_contribution");
  EXPECT_EQ(con.kind, SourceKind::residual_contribution);
  EXPECT_EQ(con.tp_shard_dim, p.expected_tp);
  EXPECT_EQ(con.sequence_dim, OptionalDim(0));
  EXPECT_EQ(con.batch_dim, OptionalDim(1));
  EXPECT_TRUE(at::equal(con.tensor, expected));
  EXPECT_FALSE(con.tensor.requires_grad());
  EXPECT_FALSE(con.tensor.is_view());
  EXPECT_FALSE(con.tensor.is_alias_of(accumulator));
  EXPECT_FALSE(con.tensor.is_alias_of(output));
  EXPECT_NE(con.tensor.data_ptr(), accumulator.data_ptr());
  EXPECT_NE(con.tensor.data_ptr(), output.data_ptr());
}

INSTANTIATE_TEST_SUITE_P(
    Observation, ObservationResiduals,
    ::testing::Values(ResidualCase{"sp_on", true, false, OptionalDim(0)},
                      ResidualCase{"sp_off", false, false, std::nullopt},
                      ResidualCase{"config_without_sp", std::nullopt, false, std::nullopt},
                      ResidualCase{"configless_owner", std::nullopt, true, std::nullopt}),
    [](const ::testing::TestParamInfo<ResidualCase>& info) { return info.param.label; });

TEST(ObservationResidualHelper, ContributionIsAFreshTensorUnaffectedByLaterWrites) {
  TestOwner layer("decoder.layers.0", true);
  at::Tensor accumulator = at::arange(6, at::kFloat).reshape({3, 2, 1});
  at::Tensor output = accumulator * 2;
  Recorder rec;
  {
    auto c =
        capture_tensor_observations(rec.callback(), KindSet{SourceKind::residual_contribution});
    observe_layer_residuals(layer, accumulator, output);
  }
  ASSERT_EQ(rec.records.size(), 1u);
  const at::Tensor contribution = rec.records[0].tensor;
  output.add_(100);
  accumulator.add_(100);
  EXPECT_TRUE(at::equal(contribution, at::arange(6, at::kFloat).reshape({3, 2, 1})));
}

TEST(ObservationResidualHelper, OnlyAccumulatorObservedDoesNotComputeTheContribution) {
  TestOwner layer("decoder.layers.0");
  // Shapes that cannot broadcast: a contribution computation would throw, so the
  // absence of an exception proves it was never computed.
  const at::Tensor accumulator = at::ones({2, 3, 4});
  const at::Tensor output = at::ones({5, 7});
  Recorder rec;
  {
    auto c = capture_tensor_observations(rec.callback(), KindSet{SourceKind::residual_accumulator});
    EXPECT_TRUE(is_observing_tensor(SourceKind::residual_accumulator));
    EXPECT_FALSE(is_observing_tensor(SourceKind::residual_contribution));
    EXPECT_NO_THROW(observe_layer_residuals(layer, accumulator, output));
  }
  ASSERT_EQ(rec.records.size(), 1u);
  EXPECT_EQ(rec.records[0].kind, SourceKind::residual_accumulator);
  EXPECT_EQ(rec.records[0].tensor_address, &accumulator);

  // Control: the same inputs do throw once the contribution is observed.
  {
    auto c =
        capture_tensor_observations(rec.callback(), KindSet{SourceKind::residual_contribution});
    EXPECT_ANY_THROW(observe_layer_residuals(layer, accumulator, output));
  }
  expect_pristine();
}

TEST(ObservationResidualHelper, OnlyContributionObserved) {
  TestOwner layer("decoder.layers.1", false);
  const at::Tensor accumulator = at::ones({2, 1, 3});
  const at::Tensor output = at::full({2, 1, 3}, 4.0);
  Recorder rec;
  {
    auto c =
        capture_tensor_observations(rec.callback(), KindSet{SourceKind::residual_contribution});
    observe_layer_residuals(layer, accumulator, output);
  }
  ASSERT_EQ(rec.records.size(), 1u);
  EXPECT_EQ(rec.records[0].kind, SourceKind::residual_contribution);
  EXPECT_TRUE(at::equal(rec.records[0].tensor, at::full({2, 1, 3}, 3.0)));
}

TEST(ObservationResidualHelper, ObservedUnderNoGradToo) {
  TestOwner layer("decoder.layers.0", true);
  const at::Tensor accumulator = at::randn({3, 2, 2}).set_requires_grad(true);
  at::Tensor output;
  {
    at::AutoGradMode grad_on(true);
    output = accumulator + 1;
  }
  Recorder rec;
  auto c = capture_tensor_observations(rec.callback(), KindSet::all());
  {
    at::NoGradGuard no_grad;
    observe_layer_residuals(layer, accumulator, output);
    EXPECT_FALSE(at::GradMode::is_enabled()) << "the caller's grad mode is left as it was";
  }
  ASSERT_EQ(rec.records.size(), 2u);
  EXPECT_EQ(rec.records[0].kind, SourceKind::residual_accumulator);
  EXPECT_EQ(rec.records[1].kind, SourceKind::residual_contribution);
  EXPECT_FALSE(rec.records[1].tensor.requires_grad());
  EXPECT_TRUE(at::allclose(rec.records[1].tensor, at::ones({3, 2, 2})));
}

// --- threads ------------------------------------------------------------------------

TEST(ObservationThreads, NewThreadStartsEmpty) {
  Recorder rec;
  auto c = capture_tensor_observations(rec.callback(), KindSet::all());
  auto s = suspend_tensor_observations();
  bool active_null = false, suspended = true;
  KindSet answered = KindSet::all();
  Recorder thread_rec;
  KindSet delivered_in_thread;
  std::thread worker([&] {
    active_null = detail::observation_state.active == nullptr;
    suspended = detail::observation_state.suspended;
    answered = answered_kinds();
    TestOwner owner("x");
    // The creator's observer is not reachable from here ...
    observe_tensor(owner, "x", SourceKind::output_logits, at::ones({1}));
    // ... and the creator's suspension does not apply here either.
    auto own = capture_tensor_observations(thread_rec.callback(), KindSet::all());
    observe_tensor(owner, "y", SourceKind::output_logits, at::ones({1}));
    delivered_in_thread = thread_rec.kinds();
  });
  worker.join();
  EXPECT_TRUE(active_null);
  EXPECT_FALSE(suspended);
  EXPECT_TRUE(answered.empty());
  EXPECT_TRUE(rec.records.empty()) << "the creating thread's callback was reached";
  EXPECT_EQ(delivered_in_thread, KindSet{SourceKind::output_logits});
  EXPECT_TRUE(detail::observation_state.suspended);
}

TEST(ObservationThreads, ScopesDoNotCrossThreadsInEitherDirection) {
  Recorder main_rec, thread_rec;
  const KindSet main_kinds{SourceKind::residual_accumulator};
  const KindSet thread_kinds{SourceKind::router_scores};
  auto c = capture_tensor_observations(main_rec.callback(), main_kinds);

  std::promise<void> thread_ready, main_checked;
  std::future<void> main_checked_f = main_checked.get_future();
  KindSet thread_answered_while_main_active, thread_answered_after;
  std::thread worker([&] {
    {
      auto tc = capture_tensor_observations(thread_rec.callback(), thread_kinds);
      auto ts = suspend_tensor_observations();
      auto tc2 = capture_tensor_observations(thread_rec.callback(), thread_kinds);
      thread_ready.set_value();
      main_checked_f.wait();  // the main thread inspects its own state meanwhile
    }
    thread_answered_while_main_active = answered_kinds();
    auto tc = capture_tensor_observations(thread_rec.callback(), thread_kinds);
    thread_answered_after = answered_kinds();
    TestOwner owner("t");
    observe_tensor(owner, "t", SourceKind::router_scores, at::ones({1}));
    observe_tensor(owner, "t", SourceKind::residual_accumulator, at::ones({1}));
  });
  thread_ready.get_future().wait();
  // The worker holds two captures and a suspension right now: none is seen here.
  expect_live(main_kinds, &main_rec, {&thread_rec});
  main_checked.set_value();
  worker.join();
  EXPECT_TRUE(thread_answered_while_main_active.empty())
      << "the worker saw the main thread's scope";
  EXPECT_EQ(thread_answered_after, thread_kinds);
  EXPECT_EQ(thread_rec.kinds(), thread_kinds);
  EXPECT_TRUE(main_rec.records.empty());
  expect_live(main_kinds, &main_rec);
}

// LibTorch runs CPU backward on the calling thread: hooks (and hence a checkpoint
// recomputation) see this thread's scopes, so the suspension around a recompute
// is what keeps it silent. (CUDA backward runs on device threads, which start
// empty: there nothing is observed at all.)
TEST(ObservationThreads, CpuBackwardRunsOnTheCallingThreadAndSeesItsScopes) {
  Recorder rec;
  const at::Tensor x = at::ones({3}, at::kDouble).set_requires_grad(true);
  const at::Tensor y = x * 2;
  std::thread::id hook_thread;
  KindSet answered_in_hook, answered_in_suspended_hook;
  y.register_hook([&](const at::Tensor& grad) {
    hook_thread = std::this_thread::get_id();
    answered_in_hook = answered_kinds();
    auto s = suspend_tensor_observations();
    answered_in_suspended_hook = answered_kinds();
  });
  {
    auto c = capture_tensor_observations(rec.callback(), KindSet{SourceKind::mlp_output});
    y.sum().backward();
  }
  EXPECT_EQ(hook_thread, std::this_thread::get_id());
  EXPECT_EQ(answered_in_hook, KindSet{SourceKind::mlp_output});
  EXPECT_TRUE(answered_in_suspended_hook.empty());
  expect_pristine();
}

// Random programs of nested capture / suspend / observe / throw on several
// threads, against an executable model of section 1: the property
// ScopeSemantics (tests/properties/test_scope_semantics.cpp).

}  // namespace
}  // namespace parity
