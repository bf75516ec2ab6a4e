// The observation API's callback (contract.md section 1; megatron-reference.md 1.6):
// its fields, grad mode, exceptions, nesting from inside it.
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

PARITY_USES_FAULT(grad_mode_gating);

namespace parity {
namespace {

using namespace testing;  // observation_recorder.h

// --- callback behaviour -------------------------------------------------------------

TEST(ObservationCallback, ReceivesTheSevenFieldsAndTheVerySameTensorObject) {
  Recorder rec;
  TestOwner owner("output_layer");
  const at::Tensor leaf = at::randn({4, 2, 8}, at::kDouble).set_requires_grad(true);
  const at::Tensor view = leaf.narrow(2, 0, 4);  // a view that requires grad
  {
    auto c = capture_tensor_observations(rec.callback(), KindSet{SourceKind::output_logits});
    observe_tensor(owner, "logits", SourceKind::output_logits, view, -1, 0, 1);
  }
  ASSERT_EQ(rec.records.size(), 1u);
  const Record& r = rec.records[0];
  EXPECT_EQ(r.owner, &owner);
  EXPECT_EQ(r.owner->canonical_name(), "output_layer");
  EXPECT_EQ(r.name, "logits");
  EXPECT_EQ(r.kind, SourceKind::output_logits);
  EXPECT_EQ(r.tensor_address, &view) << "the callback must get the caller's object";
  EXPECT_EQ(r.tensor.unsafeGetTensorImpl(), view.unsafeGetTensorImpl());
  EXPECT_TRUE(r.tensor.is_same(view));
  EXPECT_TRUE(r.tensor.requires_grad()) << "not detached";
  EXPECT_TRUE(r.tensor.is_view());
  EXPECT_EQ(r.tp_shard_dim, OptionalDim(-1));
  EXPECT_EQ(r.sequence_dim, OptionalDim(0));
  EXPECT_EQ(r.batch_dim, OptionalDim(1));
}

TEST(ObservationCallback, DimsDefaultToNone) {
  Recorder rec;
  TestOwner owner("decoder.layers.2");
  const at::Tensor t = at::ones({3});
  {
    auto c = capture_tensor_observations(rec.callback(), KindSet::all());
    observe_tensor(owner, "attn", SourceKind::attention_context, t);
    observe_tensor(owner, "mlp", SourceKind::mlp_output, t, std::nullopt, 0);
  }
  ASSERT_EQ(rec.records.size(), 2u);
  EXPECT_EQ(rec.records[0].tp_shard_dim, std::nullopt);
  EXPECT_EQ(rec.records[0].sequence_dim, std::nullopt);
  EXPECT_EQ(rec.records[0].batch_dim, std::nullopt);
  EXPECT_EQ(rec.records[1].name, "mlp");
  EXPECT_EQ(rec.records[1].tp_shard_dim, std::nullopt);
  EXPECT_EQ(rec.records[1].sequence_dim, OptionalDim(0));
  EXPECT_EQ(rec.records[1].batch_dim, std::nullopt);
}

TEST(ObservationCallback, GradModeIsNotConsulted) {
  Recorder rec;
  TestOwner owner("decoder.layers.0");
  const at::Tensor t = at::ones({2});
  auto c = capture_tensor_observations(rec.callback(), KindSet::all());
  {
    at::NoGradGuard no_grad;
    EXPECT_TRUE(is_observing_tensor(SourceKind::output_logits));
    observe_tensor(owner, "a", SourceKind::output_logits, t);
  }
  {
    at::AutoGradMode grad_on(true);
    observe_tensor(owner, "b", SourceKind::output_logits, t);
  }
  ASSERT_EQ(rec.records.size(), 2u);
  EXPECT_EQ(rec.records[0].name, "a");
  EXPECT_EQ(rec.records[1].name, "b");
}

// The code-path fault grad-mode-gating brings back the first Megatron
// revision's rule: notifications under no-grad are dropped (residuals too).
TEST(ObservationCallback, GradModeGatingFaultDropsNoGradNotifications) {
  Recorder rec;
  TestOwner owner("decoder.layers.0");
  const at::Tensor t = at::ones({2, 1, 2});
  auto c = capture_tensor_observations(rec.callback(), KindSet::all());
  {
    CodePathFaultScope fault(fault_grad_mode_gating);
    {
      at::NoGradGuard no_grad;
      observe_tensor(owner, "dropped", SourceKind::output_logits, t);
      observe_layer_residuals(owner, t, t + 1);
    }
    at::AutoGradMode grad_on(true);
    observe_tensor(owner, "kept", SourceKind::output_logits, t);
  }
  {
    at::NoGradGuard no_grad;  // fault off again: observed whatever the grad mode
    observe_tensor(owner, "after", SourceKind::output_logits, t);
  }
  ASSERT_EQ(rec.records.size(), 2u);
  EXPECT_EQ(rec.records[0].name, "kept");
  EXPECT_EQ(rec.records[1].name, "after");
}

TEST(ObservationCallback, ExceptionsPropagateAndScopesStillRestore) {
  Recorder outer;
  const KindSet outer_kinds{SourceKind::router_logits};
  auto o = capture_tensor_observations(outer.callback(), outer_kinds);
  const auto* outer_active = detail::observation_state.active;
  TestOwner owner("decoder.layers.0.mlp.router");
  const at::Tensor t = at::ones({2});
  int calls = 0;
  EXPECT_THROW(
      {
        auto i = capture_tensor_observations(
            [&](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor&,
                OptionalDim, OptionalDim, OptionalDim) {
              ++calls;
              throw std::invalid_argument("Cannot resolve a canonical tensor metric name");
            },
            KindSet::all());
        observe_tensor(owner, "router_logits", SourceKind::router_logits, t);
        ADD_FAILURE() << "the callback's exception must propagate";
      },
      std::invalid_argument);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(detail::observation_state.active, outer_active);
  EXPECT_FALSE(detail::observation_state.suspended);
  expect_live(outer_kinds, &outer);
}

TEST(ObservationCallback, ExceptionFromTheAccumulatorCallbackSkipsTheContribution) {
  TestOwner layer("decoder.layers.0");
  std::vector<SourceKind> seen;
  auto c = capture_tensor_observations(
      [&](const ObservationOwner&, std::string_view, SourceKind kind, const at::Tensor&,
          OptionalDim, OptionalDim, OptionalDim) {
        seen.push_back(kind);
        if (kind == SourceKind::residual_accumulator) throw Boom();
      },
      KindSet::all());
  EXPECT_THROW(observe_layer_residuals(layer, at::ones({2, 1, 3}), at::ones({2, 1, 3})), Boom);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], SourceKind::residual_accumulator);
  EXPECT_TRUE(at::GradMode::is_enabled());
}

TEST(ObservationCallback, CallbackSeesTheSameThreadStateAndMayNestScopes) {
  TestOwner owner("decoder.layers.0");
  const at::Tensor t = at::ones({2});
  std::vector<std::string> seen;
  TensorObservationCallback cb = [&](const ObservationOwner& o, std::string_view name,
                                     SourceKind kind, const at::Tensor& tensor, OptionalDim,
                                     OptionalDim, OptionalDim) {
    seen.emplace_back(name);
    if (name == "outer") {
      // Re-entrant observation from inside the callback reaches it (same scope) ...
      observe_tensor(o, "reentrant", SourceKind::mlp_output, tensor);
      // ... unless the callback suspends first.
      auto s = suspend_tensor_observations();
      observe_tensor(o, "suspended", SourceKind::mlp_output, tensor);
    }
  };
  auto c =
      capture_tensor_observations(cb, KindSet{SourceKind::output_logits, SourceKind::mlp_output});
  observe_tensor(owner, "outer", SourceKind::output_logits, t);
  EXPECT_EQ(seen, (std::vector<std::string>{"outer", "reentrant"}));
  EXPECT_FALSE(detail::observation_state.suspended);
  EXPECT_TRUE(is_observing_tensor(SourceKind::mlp_output));
}

TEST(ObservationCallback, TheScopeOwnsACopyOfTheCallback) {
  int calls = 0;
  TestOwner owner("x");
  const at::Tensor t = at::ones({1});
  std::optional<TensorObservationCapture> scope;
  {
    TensorObservationCallback cb = [&](auto&&...) { ++calls; };
    scope.emplace(cb, KindSet::all());
  }  // the caller's std::function is gone
  observe_tensor(owner, "x", SourceKind::output_logits, t);
  scope.reset();
  observe_tensor(owner, "x", SourceKind::output_logits, t);
  EXPECT_EQ(calls, 1);
  expect_pristine();
}

}  // namespace
}  // namespace parity
