#pragma once
// What the observation API's tests share: an owner, a recorder of every
// callback field, and checks of the thread's live state three ways.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "harness/observation/tensor_observation.h"
#include "tests/support/named_owner.h"

namespace parity::testing {

inline constexpr SourceKind kAllKinds[] = {
    SourceKind::residual_accumulator, SourceKind::residual_contribution,
    SourceKind::output_logits,        SourceKind::attention_context,
    SourceKind::mlp_output,           SourceKind::router_logits,
    SourceKind::router_scores,        SourceKind::router_diagnostics,
    SourceKind::mtp_logits,           SourceKind::layernorm_output,
    SourceKind::weight_gradient,
};

using TestOwner = NamedOwner;

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

inline KindSet answered_kinds() {
  KindSet s;
  for (SourceKind k : kAllKinds)
    if (is_observing_tensor(k)) s.insert(k);
  return s;
}

// Checks the live state three ways: is_observing_tensor for every kind, the
// derived live_kinds mask, and actual delivery of one observe_tensor per kind
// (`target` must receive exactly `expected`, `others` nothing).
inline void expect_live(KindSet expected, Recorder* target, std::vector<Recorder*> others = {}) {
  EXPECT_EQ(answered_kinds(), expected);
  EXPECT_EQ(detail::observation_state.live_kinds, expected.bits());
  if (target != nullptr) target->records.clear();
  for (Recorder* r : others) r->records.clear();
  static const TestOwner probe_owner("probe");
  const at::Tensor t = at::zeros({1});
  for (SourceKind k : kAllKinds) observe_tensor(probe_owner, "probe", k, t);
  if (target != nullptr) {
    EXPECT_EQ(target->kinds(), expected);
    EXPECT_EQ(static_cast<int>(target->records.size()), __builtin_popcount(expected.bits()));
    target->records.clear();
  } else {
    EXPECT_TRUE(expected.empty());
  }
  for (Recorder* r : others) {
    EXPECT_TRUE(r->records.empty()) << "an outer/other callback was notified";
    r->records.clear();
  }
}

inline void expect_pristine() {
  EXPECT_EQ(detail::observation_state.active, nullptr);
  EXPECT_FALSE(detail::observation_state.suspended);
  EXPECT_EQ(detail::observation_state.live_kinds, 0u);
  EXPECT_TRUE(answered_kinds().empty());
}

struct Boom : std::runtime_error {
  Boom() : std::runtime_error("boom") {}
};

}  // namespace parity::testing
