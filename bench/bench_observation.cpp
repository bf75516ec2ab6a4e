// Cost of an observation site when nothing observes it (contract.md section 1:
// "an observation call with no active scope is a thread-local load and a branch").
//
// Every iteration launders the tensor reference and the kind through
// benchmark::DoNotOptimize (an empty asm with a memory clobber), so the compiler
// can neither hoist the thread-local load out of the loop nor fold the kind test:
// each iteration pays the full inline gate, as a site in model code does.
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include "harness/observation/tensor_observation.h"

namespace parity {
namespace {

class BenchOwner : public ObservationOwner {
 public:
  const std::string& canonical_name() const override { return name_; }
  std::optional<bool> config_sequence_parallel() const override { return true; }

 private:
  std::string name_ = "decoder.layers.0";
};

const BenchOwner& owner() {
  static const BenchOwner o;
  return o;
}
const at::Tensor& tensor() {
  static const at::Tensor t = at::zeros({4, 2, 8});
  return t;
}

enum class Setup { no_scope, scope_without_kind, suspended, scope_with_kind };

void open_scope(Setup setup, std::int64_t& calls, std::optional<TensorObservationCapture>& scope) {
  if (setup == Setup::no_scope) return;
  // The observed kind is output_logits; "without kind" installs every other kind.
  KindSet kinds =
      setup == Setup::scope_without_kind
          ? KindSet::from_bits(KindSet::all().bits() & ~KindSet::bit(SourceKind::output_logits))
          : KindSet::all();
  scope.emplace(
      [&calls](const ObservationOwner&, std::string_view, SourceKind, const at::Tensor& t,
               OptionalDim, OptionalDim, OptionalDim) {
        ++calls;
        benchmark::DoNotOptimize(&t);
      },
      kinds);
}

void BM_LoopBaseline(benchmark::State& state) {
  // The laundering alone, for subtraction.
  const at::Tensor* t = &tensor();
  SourceKind kind = SourceKind::output_logits;
  for (auto _ : state) {
    benchmark::DoNotOptimize(t);
    benchmark::DoNotOptimize(kind);
  }
}
BENCHMARK(BM_LoopBaseline);

template <Setup setup>
void BM_ObserveTensor(benchmark::State& state) {
  std::int64_t calls = 0;
  std::optional<TensorObservationCapture> scope;
  open_scope(setup, calls, scope);
  std::optional<TensorObservationSuspension> suspension;
  if (setup == Setup::suspended) suspension.emplace();
  const at::Tensor* t = &tensor();
  const ObservationOwner* o = &owner();
  SourceKind kind = SourceKind::output_logits;
  for (auto _ : state) {
    benchmark::DoNotOptimize(t);
    benchmark::DoNotOptimize(kind);
    observe_tensor(*o, "output_logits", kind, *t, -1, 0, 1);
  }
  state.counters["callbacks"] = static_cast<double>(calls);
}
BENCHMARK_TEMPLATE(BM_ObserveTensor, Setup::no_scope)->Name("BM_ObserveTensor/no_scope");
BENCHMARK_TEMPLATE(BM_ObserveTensor, Setup::scope_without_kind)
    ->Name("BM_ObserveTensor/scope_without_kind");
BENCHMARK_TEMPLATE(BM_ObserveTensor, Setup::suspended)->Name("BM_ObserveTensor/suspended");
BENCHMARK_TEMPLATE(BM_ObserveTensor, Setup::scope_with_kind)
    ->Name("BM_ObserveTensor/active_trivial_callback");

template <Setup setup>
void BM_IsObservingTensor(benchmark::State& state) {
  std::int64_t calls = 0;
  std::optional<TensorObservationCapture> scope;
  open_scope(setup, calls, scope);
  SourceKind kind = SourceKind::output_logits;
  for (auto _ : state) {
    benchmark::DoNotOptimize(kind);
    bool observing = is_observing_tensor(kind);
    benchmark::DoNotOptimize(observing);
  }
}
BENCHMARK_TEMPLATE(BM_IsObservingTensor, Setup::no_scope)->Name("BM_IsObservingTensor/no_scope");
BENCHMARK_TEMPLATE(BM_IsObservingTensor, Setup::scope_without_kind)
    ->Name("BM_IsObservingTensor/scope_without_kind");

// The residual helper is out of line (it builds the contribution); with nothing
// observed it costs a call plus two gate tests.
void BM_ObserveLayerResiduals_NoScope(benchmark::State& state) {
  const at::Tensor* t = &tensor();
  for (auto _ : state) {
    benchmark::DoNotOptimize(t);
    observe_layer_residuals(owner(), *t, *t);
  }
}
BENCHMARK(BM_ObserveLayerResiduals_NoScope);

}  // namespace
}  // namespace parity

BENCHMARK_MAIN();
