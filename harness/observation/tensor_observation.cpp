// C++ port of Megatron Core's `core.tensor_observation` (contract.md section 1).
// The inline fast path (is_observing_tensor / observe_tensor) lives in the header;
// this file holds the per-thread state, the RAII scopes and the single gate.
#include "harness/observation/tensor_observation.h"

#include "harness/base/check.h"
#include "harness/faults/code_path_faults.h"
#include "harness/observation/scope_order.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in 2.x)

#include <stdexcept>
#include <utility>

PARITY_USES_FAULT(contribution_with_autograd);
PARITY_USES_FAULT(grad_mode_gating);

namespace parity {
namespace detail {

// Constant-initialized (see the header): no dynamic TLS initializer exists, so
// the header's __constinit promise holds and callers never call a TLS wrapper.
PARITY_OBSERVATION_CONSTINIT thread_local ObservationState observation_state
    PARITY_OBSERVATION_TLS_MODEL;

namespace {
// live_kinds is derived, never set independently: suspension wins, then the
// active scope's kinds, else nothing.
inline void recompute_live_kinds(ObservationState& state) {
  state.live_kinds =
      state.suspended ? 0u : (state.active != nullptr ? state.active->kinds.bits() : 0u);
}
}  // namespace

// The single private gate. It re-checks every condition itself rather than
// trusting the caller's fast-path test, so every route to a callback obeys the
// same rule: not suspended, a scope is active, the kind is in its set. Grad mode
// is not consulted. Exceptions from the callback propagate unchanged.
void notify_observer_slow(const ObservationOwner& owner, std::string_view name, SourceKind kind,
                          const at::Tensor& tensor, OptionalDim tp_shard_dim,
                          OptionalDim sequence_dim, OptionalDim batch_dim) {
  const ObservationState& state = observation_state;
  if (state.suspended) return;
  // Fault grad-mode-gating: the first Megatron revision's rule, observe only while grad mode is on.
  if (fault_active(fault_grad_mode_gating) && !at::GradMode::is_enabled()) return;
  const ActiveObserver* active = state.active;
  if (active == nullptr || !active->kinds.contains(kind)) return;
  (*active->callback)(owner, name, kind, tensor, tp_shard_dim, sequence_dim, batch_dim);
}

}  // namespace detail

// --- scopes ---------------------------------------------------------------------
// Each scope saves the value it overwrites and puts exactly that value back on
// exit (never a default), so any nesting order composes like ContextVar
// set/reset. Destructors run during stack unwinding, so exceptions restore too.

TensorObservationCapture::TensorObservationCapture(TensorObservationCallback callback,
                                                   KindSet kinds)
    : callback_(std::move(callback)), observer_{&callback_, kinds}, previous_(nullptr) {
  // Megatron would fail only when a notification calls None; failing at the
  // scope is clearer and keeps the gate free of a "no callback" test.
  PARITY_CHECK(callback_, "capture_tensor_observations: empty callback");
  auto& state = detail::observation_state;
  previous_ = state.active;
  state.active = &observer_;
  detail::recompute_live_kinds(state);
}

TensorObservationCapture::~TensorObservationCapture() {
  auto& state = detail::observation_state;
  if (state.active != &observer_) detail::scope_destroyed_out_of_order("TensorObservationCapture");
  state.active = previous_;
  detail::recompute_live_kinds(state);
}

TensorObservationSuspension::TensorObservationSuspension()
    : previous_(detail::observation_state.suspended),
      outer_(detail::observation_state.suspension_owner) {
  auto& state = detail::observation_state;
  state.suspended = true;
  state.suspension_owner = this;
  detail::recompute_live_kinds(state);
}

TensorObservationSuspension::~TensorObservationSuspension() {
  auto& state = detail::observation_state;
  if (state.suspension_owner != this)
    detail::scope_destroyed_out_of_order("TensorObservationSuspension");
  state.suspended = previous_;
  state.suspension_owner = outer_;
  detail::recompute_live_kinds(state);
}

// --- the residual helper ----------------------------------------------------------

void observe_layer_residuals(const ObservationOwner& layer, const at::Tensor& accumulator,
                             const at::Tensor& output) {
  // Neither kind observed: nothing to do (the owner's config is not even read).
  constexpr std::uint32_t kResidualBits = KindSet::bit(SourceKind::residual_accumulator) |
                                          KindSet::bit(SourceKind::residual_contribution);
  if (PARITY_OBSERVATION_LIKELY((detail::observation_state.live_kinds & kResidualBits) == 0))
    return;
  // Megatron: truthy(getattr(getattr(layer, "config", None), "sequence_parallel", False)).
  // A config-less owner answers nullopt, which is not sequence parallel.
  const OptionalDim tp_shard_dim =
      layer.config_sequence_parallel().value_or(false) ? OptionalDim(0) : std::nullopt;
  constexpr std::int64_t kSequenceDim = 0;  // tensors are [s, b, h]
  constexpr std::int64_t kBatchDim = 1;

  if (is_observing_tensor(SourceKind::residual_accumulator)) {
    // The accumulator object itself: not detached, not copied.
    detail::notify_observer_slow(layer, "residual_accumulator", SourceKind::residual_accumulator,
                                 accumulator, tp_shard_dim, kSequenceDim, kBatchDim);
  }
  // Checked after the accumulator's callback has returned: that callback may have
  // changed what is observed (Megatron evaluates is_observing_tensor here too).
  if (is_observing_tensor(SourceKind::residual_contribution)) {
    at::Tensor contribution;
    {
      // Without autograd, whatever the grad mode or the inputs' requires_grad:
      // the subtraction allocates a fresh tensor that shares storage with neither.
      at::NoGradGuard no_grad;
      contribution = output.detach() - accumulator.detach();
    }
    if (fault_active(fault_contribution_with_autograd)) contribution = output - accumulator;
    detail::notify_observer_slow(layer, "residual_contribution", SourceKind::residual_contribution,
                                 contribution, tp_shard_dim, kSequenceDim, kBatchDim);
  }
}

}  // namespace parity
