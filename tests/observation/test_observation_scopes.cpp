// The observation API's scopes (contract.md section 1; megatron-reference.md 1.3-1.5):
// the callback type, no scope, the nesting table, restoration on exceptions.
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

// --- the callback type ---------------------------------------------------------

static_assert(
    std::is_same_v<TensorObservationCallback,
                   std::function<void(const ObservationOwner&, std::string_view, SourceKind,
                                      const at::Tensor&, OptionalDim, OptionalDim, OptionalDim)>>,
    "seven positional fields in Megatron's order");

// --- no scope / empty set ---------------------------------------------------------

TEST(ObservationScopes, NoScopeIsANoOp) {
  expect_pristine();
  TestOwner owner("decoder.layers.0", true);
  const at::Tensor a = at::ones({2, 3, 4});
  // Shapes that cannot broadcast: computing the contribution would throw.
  const at::Tensor b = at::ones({5, 7});
  EXPECT_NO_THROW(observe_layer_residuals(owner, a, b));
  for (SourceKind k : kAllKinds) EXPECT_NO_THROW(observe_tensor(owner, "x", k, a));
  expect_pristine();
}

TEST(ObservationScopes, EmptyKindSetMakesEverythingANoOp) {
  Recorder rec;
  {
    auto scope = capture_tensor_observations(rec.callback(), KindSet{});
    EXPECT_NE(detail::observation_state.active, nullptr);
    expect_live(KindSet{}, &rec);
    TestOwner owner("decoder.layers.0");
    EXPECT_NO_THROW(observe_layer_residuals(owner, at::ones({2, 3, 4}), at::ones({5, 7})));
    EXPECT_TRUE(rec.records.empty());
  }
  expect_pristine();
}

TEST(ObservationScopes, KindOutsideTheSetIsNotDelivered) {
  Recorder rec;
  const KindSet kinds{SourceKind::output_logits, SourceKind::router_scores};
  {
    auto scope = capture_tensor_observations(rec.callback(), kinds);
    expect_live(kinds, &rec);
    for (SourceKind k : kAllKinds)
      EXPECT_EQ(is_observing_tensor(k), kinds.contains(k)) << to_string(k);
  }
  expect_pristine();
}

TEST(ObservationScopes, EmptyCallbackIsRejectedAndLeavesStateAlone) {
  Recorder outer;
  auto scope = capture_tensor_observations(outer.callback(), KindSet::all());
  const auto* active = detail::observation_state.active;
  EXPECT_THROW(TensorObservationCapture(TensorObservationCallback{}, KindSet::all()),
               std::invalid_argument);
  EXPECT_EQ(detail::observation_state.active, active);
  expect_live(KindSet::all(), &outer);
}

// --- nesting table (megatron-reference.md 1.5) ---------------------------------------

TEST(ObservationScopes, CaptureInsideCaptureReplacesThenRestoresOuter) {
  Recorder outer, inner;
  const KindSet outer_kinds{SourceKind::residual_accumulator, SourceKind::output_logits};
  const KindSet inner_kinds{SourceKind::output_logits, SourceKind::mlp_output};
  {
    auto o = capture_tensor_observations(outer.callback(), outer_kinds);
    const auto* outer_active = detail::observation_state.active;
    expect_live(outer_kinds, &outer, {&inner});
    {
      auto i = capture_tensor_observations(inner.callback(), inner_kinds);
      // No merge, no fan-out: residual_accumulator (outer only) is silent, and
      // output_logits (both) reaches only the inner callback.
      expect_live(inner_kinds, &inner, {&outer});
    }
    EXPECT_EQ(detail::observation_state.active, outer_active);
    expect_live(outer_kinds, &outer, {&inner});
  }
  expect_pristine();
}

TEST(ObservationScopes, CaptureInsideCaptureWithTheSameCallbackTypeIsStillReplacement) {
  Recorder rec;
  {
    auto o = capture_tensor_observations(rec.callback(), KindSet::all());
    {
      auto i = capture_tensor_observations(rec.callback(), KindSet{SourceKind::mtp_logits});
      expect_live(KindSet{SourceKind::mtp_logits}, &rec);
    }
    expect_live(KindSet::all(), &rec);
  }
  expect_pristine();
}

TEST(ObservationScopes, SuspendInsideCaptureSilencesUntilItExits) {
  Recorder rec;
  {
    auto c = capture_tensor_observations(rec.callback(), KindSet::all());
    expect_live(KindSet::all(), &rec);
    {
      auto s = suspend_tensor_observations();
      EXPECT_TRUE(detail::observation_state.suspended);
      expect_live(KindSet{}, &rec);
      TestOwner owner("decoder.layers.1", true);
      EXPECT_NO_THROW(observe_layer_residuals(owner, at::ones({2, 3, 4}), at::ones({5, 7})));
      EXPECT_TRUE(rec.records.empty());
    }
    EXPECT_FALSE(detail::observation_state.suspended);
    expect_live(KindSet::all(), &rec);
  }
  expect_pristine();
}

TEST(ObservationScopes, CaptureInsideSuspendStaysSilentAndDoesNotClearSuspension) {
  Recorder rec;
  {
    auto s = suspend_tensor_observations();
    expect_live(KindSet{}, nullptr);
    {
      auto c = capture_tensor_observations(rec.callback(), KindSet::all());
      EXPECT_TRUE(detail::observation_state.suspended);
      EXPECT_NE(detail::observation_state.active, nullptr);
      expect_live(KindSet{}, &rec);
    }
    EXPECT_TRUE(detail::observation_state.suspended);
    EXPECT_EQ(detail::observation_state.active, nullptr);
    expect_live(KindSet{}, &rec);
  }
  expect_pristine();
}

TEST(ObservationScopes, CaptureThenSuspendThenCaptureStaysSilentThroughout) {
  Recorder a, b;
  {
    auto ca = capture_tensor_observations(a.callback(), KindSet::all());
    auto s = suspend_tensor_observations();
    {
      auto cb = capture_tensor_observations(b.callback(), KindSet::all());
      expect_live(KindSet{}, &b, {&a});
    }
    expect_live(KindSet{}, &a, {&b});
  }
  expect_pristine();
}

TEST(ObservationScopes, SuspendInsideSuspendRestoresInOrder) {
  Recorder rec;
  auto c = capture_tensor_observations(rec.callback(), KindSet::all());
  {
    auto outer = suspend_tensor_observations();
    EXPECT_TRUE(detail::observation_state.suspended);
    {
      auto inner = suspend_tensor_observations();
      EXPECT_TRUE(detail::observation_state.suspended);
      expect_live(KindSet{}, &rec);
    }
    // Inner exit restores `true` (the value it replaced), not the default.
    EXPECT_TRUE(detail::observation_state.suspended);
    expect_live(KindSet{}, &rec);
  }
  EXPECT_FALSE(detail::observation_state.suspended);
  expect_live(KindSet::all(), &rec);
}

TEST(ObservationScopes, IsObservingEveryKindUnderEachNesting) {
  // Every kind, alone in the set: answered and delivered exactly under the
  // nestings that leave it live.
  for (SourceKind k : kAllKinds) {
    SCOPED_TRACE(std::string(to_string(k)));
    const KindSet only{k};
    Recorder outer, inner;
    expect_live(KindSet{}, nullptr);
    {
      auto o = capture_tensor_observations(outer.callback(), only);
      expect_live(only, &outer);
      {
        auto i = capture_tensor_observations(inner.callback(), KindSet{});
        expect_live(KindSet{}, &inner, {&outer});
        EXPECT_FALSE(is_observing_tensor(k));
      }
      {
        auto i = capture_tensor_observations(inner.callback(), only);
        EXPECT_TRUE(is_observing_tensor(k));
        auto s = suspend_tensor_observations();
        EXPECT_FALSE(is_observing_tensor(k));
        expect_live(KindSet{}, &inner, {&outer});
      }
      {
        auto s = suspend_tensor_observations();
        EXPECT_FALSE(is_observing_tensor(k));
        auto i = capture_tensor_observations(inner.callback(), only);
        EXPECT_FALSE(is_observing_tensor(k));
        auto s2 = suspend_tensor_observations();
        EXPECT_FALSE(is_observing_tensor(k));
      }
      EXPECT_TRUE(is_observing_tensor(k));
      expect_live(only, &outer, {&inner});
    }
    expect_pristine();
  }
}

// --- exceptions restore -------------------------------------------------------------

TEST(ObservationScopes, ExceptionInsideCaptureRestoresNoScope) {
  Recorder rec;
  EXPECT_THROW(
      {
        auto c = capture_tensor_observations(rec.callback(), KindSet::all());
        throw Boom();
      },
      Boom);
  expect_pristine();
}

TEST(ObservationScopes, ExceptionInsideNestedCaptureRestoresOuter) {
  Recorder outer, inner;
  const KindSet outer_kinds{SourceKind::output_logits};
  auto o = capture_tensor_observations(outer.callback(), outer_kinds);
  const auto* outer_active = detail::observation_state.active;
  EXPECT_THROW(
      {
        auto i = capture_tensor_observations(inner.callback(), KindSet::all());
        throw Boom();
      },
      Boom);
  EXPECT_EQ(detail::observation_state.active, outer_active);
  expect_live(outer_kinds, &outer, {&inner});
}

TEST(ObservationScopes, ExceptionInsideSuspendRestoresUnsuspended) {
  Recorder rec;
  auto c = capture_tensor_observations(rec.callback(), KindSet::all());
  EXPECT_THROW(
      {
        auto s = suspend_tensor_observations();
        throw Boom();
      },
      Boom);
  EXPECT_FALSE(detail::observation_state.suspended);
  expect_live(KindSet::all(), &rec);
}

TEST(ObservationScopes, ExceptionInsideSuspendInsideSuspendRestoresSuspended) {
  Recorder rec;
  auto c = capture_tensor_observations(rec.callback(), KindSet::all());
  {
    auto outer = suspend_tensor_observations();
    EXPECT_THROW(
        {
          auto inner = suspend_tensor_observations();
          throw Boom();
        },
        Boom);
    EXPECT_TRUE(detail::observation_state.suspended);
    expect_live(KindSet{}, &rec);
  }
  expect_live(KindSet::all(), &rec);
}

TEST(ObservationScopes, ExceptionInsideCaptureInsideSuspendRestoresBoth) {
  Recorder rec;
  {
    auto s = suspend_tensor_observations();
    EXPECT_THROW(
        {
          auto c = capture_tensor_observations(rec.callback(), KindSet::all());
          throw Boom();
        },
        Boom);
    EXPECT_TRUE(detail::observation_state.suspended);
    EXPECT_EQ(detail::observation_state.active, nullptr);
  }
  expect_pristine();
}

TEST(ObservationScopes, ExceptionThroughSeveralScopesRestoresEverything) {
  Recorder a, b;
  EXPECT_THROW(
      {
        auto ca = capture_tensor_observations(a.callback(), KindSet::all());
        auto s1 = suspend_tensor_observations();
        auto cb = capture_tensor_observations(b.callback(), KindSet{SourceKind::mlp_output});
        auto s2 = suspend_tensor_observations();
        throw Boom();
      },
      Boom);
  expect_pristine();
}

}  // namespace
}  // namespace parity
