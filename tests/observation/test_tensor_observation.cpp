// Tests for the observation API (contract.md section 1; megatron-reference.md 1.3-1.6).
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

PARITY_USES_FAULT(grad_mode_gating);

namespace parity {
namespace {

constexpr SourceKind kAllKinds[] = {
    SourceKind::residual_accumulator, SourceKind::residual_contribution,
    SourceKind::output_logits,        SourceKind::attention_context,
    SourceKind::mlp_output,           SourceKind::router_logits,
    SourceKind::router_scores,        SourceKind::router_diagnostics,
    SourceKind::mtp_logits,           SourceKind::layernorm_output,
    SourceKind::weight_gradient,
};

class TestOwner : public ObservationOwner {
 public:
  explicit TestOwner(std::string name, std::optional<bool> sequence_parallel = std::nullopt)
      : name_(std::move(name)), sequence_parallel_(sequence_parallel) {}
  const std::string& canonical_name() const override { return name_; }
  std::optional<bool> config_sequence_parallel() const override { return sequence_parallel_; }

 private:
  std::string name_;
  std::optional<bool> sequence_parallel_;
};

// Megatron's owner without a `config` attribute: the base class default.
class ConfiglessOwner : public ObservationOwner {
 public:
  const std::string& canonical_name() const override { return name_; }

 private:
  std::string name_ = "output_layer";
};

// One callback invocation, all seven fields, plus the address of the tensor
// argument so "the very same object" can be asserted, not just the same impl.
struct Record {
  const ObservationOwner* owner;
  std::string name;
  SourceKind kind;
  at::Tensor tensor;
  const at::Tensor* tensor_address;
  OptionalDim tp_shard_dim;
  OptionalDim sequence_dim;
  OptionalDim batch_dim;
};

struct Recorder {
  std::vector<Record> records;
  TensorObservationCallback callback() {
    return [this](const ObservationOwner& owner, std::string_view name, SourceKind kind,
                  const at::Tensor& tensor, OptionalDim tp, OptionalDim seq, OptionalDim batch) {
      records.push_back(Record{&owner, std::string(name), kind, tensor, &tensor, tp, seq, batch});
    };
  }
  KindSet kinds() const {
    KindSet s;
    for (const Record& r : records) s.insert(r.kind);
    return s;
  }
};

KindSet answered_kinds() {
  KindSet s;
  for (SourceKind k : kAllKinds)
    if (is_observing_tensor(k)) s.insert(k);
  return s;
}

// Checks the live state three ways: is_observing_tensor for every kind, the
// derived live_kinds mask, and actual delivery of one observe_tensor per kind
// (`target` must receive exactly `expected`, `others` nothing).
void expect_live(KindSet expected, Recorder* target, std::vector<Recorder*> others = {}) {
  EXPECT_EQ(answered_kinds(), expected);
  EXPECT_EQ(detail::observation_state.live_kinds, expected.bits());
  if (target != nullptr) target->records.clear();
  for (Recorder* r : others) r->records.clear();
  static const TestOwner probe_owner("probe");
  const at::Tensor t = at::zeros({1});
  for (SourceKind k : kAllKinds) observe_tensor(probe_owner, "probe", k, t);
  if (target != nullptr) {
    EXPECT_EQ(target->kinds(), expected);
    EXPECT_EQ(static_cast<int>(target->records.size()),
              __builtin_popcount(expected.bits()));
    target->records.clear();
  } else {
    EXPECT_TRUE(expected.empty());
  }
  for (Recorder* r : others) {
    EXPECT_TRUE(r->records.empty()) << "an outer/other callback was notified";
    r->records.clear();
  }
}

void expect_pristine() {
  EXPECT_EQ(detail::observation_state.active, nullptr);
  EXPECT_FALSE(detail::observation_state.suspended);
  EXPECT_EQ(detail::observation_state.live_kinds, 0u);
  EXPECT_TRUE(answered_kinds().empty());
}

struct Boom : std::runtime_error {
  Boom() : std::runtime_error("boom") {}
};

// --- the callback type ---------------------------------------------------------

static_assert(std::is_same_v<TensorObservationCallback,
                             std::function<void(const ObservationOwner&, std::string_view,
                                                SourceKind, const at::Tensor&, OptionalDim,
                                                OptionalDim, OptionalDim)>>,
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
  auto c = capture_tensor_observations(cb, KindSet{SourceKind::output_logits,
                                                   SourceKind::mlp_output});
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
    auto c =
        capture_tensor_observations(rec.callback(), KindSet{SourceKind::residual_accumulator});
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
