#pragma once
// C++ port of Megatron Core's `core.tensor_observation` (contract.md section 1).
//
// Model code announces short-lived tensors; an observer installed with
// capture_tensor_observations() receives them. State is per thread (the analogue
// of Python context variables): an active (callback, kinds) pair and a suspended
// flag, each set by an RAII scope that restores the previous value on exit,
// exceptions included. A new thread starts with neither; a backend whose
// backward runs on another thread carries the state there with the per-thread
// context (thread_context.h). A scope destroyed while a later scope of the same
// kind is alive aborts with a message (scope_order.h) instead of restoring a
// pointer into a dead scope.
//
// A notification reaches the callback iff: not suspended, a scope is active, and
// the kind is in its set. Grad mode is NOT consulted.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "harness/observation/source_kind.h"

namespace at {
class Tensor;
}

namespace parity {

// A model object that owns observation sites. Its canonical name is the dotted
// module path Megatron's observer resolves (`decoder.layers.3`, `output_layer`).
class ObservationOwner {
 public:
  virtual ~ObservationOwner() = default;
  virtual const std::string& canonical_name() const = 0;
  // Megatron reads `layer.config.sequence_parallel`; an owner without a config
  // answers nullopt, which the residual helper treats as "not sequence parallel".
  virtual std::optional<bool> config_sequence_parallel() const { return std::nullopt; }
};

using OptionalDim = std::optional<std::int64_t>;

// The seven positional fields, in Megatron's order: owner, local name, source
// kind, tensor (the very object the site holds: may require grad, may be a view,
// may be a static graph buffer), tp_shard_dim, sequence_dim, batch_dim.
using TensorObservationCallback = std::function<void(
    const ObservationOwner& owner, std::string_view name, SourceKind kind, const at::Tensor& tensor,
    OptionalDim tp_shard_dim, OptionalDim sequence_dim, OptionalDim batch_dim)>;

namespace detail {
struct ActiveObserver {
  const TensorObservationCallback* callback;
  KindSet kinds;
};
struct ObservationState {
  const ActiveObserver* active = nullptr;
  bool suspended = false;
  // Derived: the kinds that currently reach a callback (0 when suspended or no
  // scope). Kept in the same cache line so the gate is one load and a branch.
  std::uint32_t live_kinds = 0;
  // The innermost live suspension scope (the out-of-order check; `active` is
  // the capture scope's own identity).
  const void* suspension_owner = nullptr;
};
// The thread-local state. Two attributes keep the gate a plain %fs-relative
// load with no call:
//  * constant initialization is promised (GCC's __constinit, clang's
//    require_constant_initialization, both C++17-compatible spellings of C++20
//    constinit), so callers in other translation units skip the TLS wrapper
//    (`_ZTW`/`_ZTH` "is it initialized yet?" check and call);
//  * initial-exec TLS model, so even a -fPIC compile of this static library
//    does not go through __tls_get_addr.
#if defined(__clang__)
#define PARITY_OBSERVATION_CONSTINIT [[clang::require_constant_initialization]]
#elif defined(__GNUC__) && __GNUC__ >= 10
#define PARITY_OBSERVATION_CONSTINIT __constinit
#else
#define PARITY_OBSERVATION_CONSTINIT
#endif
#if defined(__GNUC__)
#define PARITY_OBSERVATION_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define PARITY_OBSERVATION_TLS_MODEL
#endif
#if defined(__GNUC__)
#define PARITY_OBSERVATION_LIKELY(x) __builtin_expect(static_cast<bool>(x), 1)
#else
#define PARITY_OBSERVATION_LIKELY(x) (x)
#endif
PARITY_OBSERVATION_CONSTINIT extern thread_local ObservationState observation_state
    PARITY_OBSERVATION_TLS_MODEL;

void notify_observer_slow(const ObservationOwner& owner, std::string_view name, SourceKind kind,
                          const at::Tensor& tensor, OptionalDim tp_shard_dim,
                          OptionalDim sequence_dim, OptionalDim batch_dim);
}  // namespace detail

// True iff a notification of `kind` would reach a callback right now.
inline bool is_observing_tensor(SourceKind kind) {
  return (detail::observation_state.live_kinds & KindSet::bit(kind)) != 0;
}

// Forwards to the single notify gate. No shape check, no detach, no copy.
inline void observe_tensor(const ObservationOwner& owner, std::string_view name, SourceKind kind,
                           const at::Tensor& tensor, OptionalDim tp_shard_dim = std::nullopt,
                           OptionalDim sequence_dim = std::nullopt,
                           OptionalDim batch_dim = std::nullopt) {
  // Hinted cold so the compiler keeps the call's argument set-up off the fast path.
  if (PARITY_OBSERVATION_LIKELY(!is_observing_tensor(kind))) return;
  detail::notify_observer_slow(owner, name, kind, tensor, tp_shard_dim, sequence_dim, batch_dim);
}

// The residual helper: accumulator first (un-detached), then the contribution
// `output - accumulator`, computed without autograd into a fresh tensor and only
// when residual_contribution is observed. tp_shard_dim = 0 iff the layer's config
// has sequence parallel on; sequence_dim 0, batch_dim 1.
void observe_layer_residuals(const ObservationOwner& layer, const at::Tensor& accumulator,
                             const at::Tensor& output);

// RAII scope: installs (callback, kinds) as the active observer of this thread;
// the inner scope replaces the outer (no merge); the previous one is restored on
// exit. The callback is copied into the scope.
class [[nodiscard]] TensorObservationCapture {
 public:
  TensorObservationCapture(TensorObservationCallback callback, KindSet kinds);
  ~TensorObservationCapture();
  TensorObservationCapture(const TensorObservationCapture&) = delete;
  TensorObservationCapture& operator=(const TensorObservationCapture&) = delete;

 private:
  TensorObservationCallback callback_;
  detail::ActiveObserver observer_;
  const detail::ActiveObserver* previous_;
};

// RAII scope: suspends every notification of this thread (used by checkpoint
// recomputation); suspension wins over capture in any nesting order.
class [[nodiscard]] TensorObservationSuspension {
 public:
  TensorObservationSuspension();
  ~TensorObservationSuspension();
  TensorObservationSuspension(const TensorObservationSuspension&) = delete;
  TensorObservationSuspension& operator=(const TensorObservationSuspension&) = delete;

 private:
  bool previous_;
  const void* outer_;
};

// Megatron-style spellings. Guaranteed copy elision lets these return the
// non-movable scopes: `auto scope = capture_tensor_observations(cb, kinds);`
inline TensorObservationCapture capture_tensor_observations(TensorObservationCallback callback,
                                                            KindSet kinds) {
  return TensorObservationCapture(std::move(callback), kinds);
}
inline TensorObservationSuspension suspend_tensor_observations() {
  return TensorObservationSuspension();
}

}  // namespace parity
