#pragma once
// The one interface both backends implement (reference/: plain ATen CPU ops and
// Gloo; cuda/: fused kernels, NCCL, real CUDA graphs). Like c10d's Backend split:
// the model structure (what runs in what order, where observations happen, how
// recompute and graphs wrap it) lives in harness/model/ and is written once
// against this interface; a backend provides the primitive ops only and never
// re-implements the layer.
//
// Every op is differentiable through the backend's own autograd (the reference
// uses ATen's; the CUDA backend registers custom autograd nodes). Layout is
// Megatron's: activations [s, b, h].
//
// Torch stays out of this header: tensors and generators are forward-declared.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "harness/observation/graph_phase.h"

namespace at {
class Tensor;
struct Generator;
}  // namespace at

namespace parity {

// The random streams of Megatron's model-parallel RNG tracker:
//   data_parallel  - the default generator: identical on every TP rank (so a
//                    TP-replicated tensor gets the same dropout mask everywhere);
//   model_parallel - the tracker's fork (`model-parallel-rng`): distinct per TP
//                    rank, used for TP-sharded tensors (dropout under SP,
//                    attention dropout on split heads).
enum class RngStream : std::int8_t { data_parallel, model_parallel };
inline constexpr int kRngStreamCount = 2;

// Opaque generator states, one byte string per stream, in RngStream order.
struct RngSnapshot {
  std::vector<std::vector<std::uint8_t>> states;
};

// Megatron's CudaRNGStatesTracker analogue. Every rank owns its generators (thread
// ranks must never share ATen's default generator). Checkpoints snapshot the
// states before the no-grad forward and restore them around the recomputation so
// dropout masks are reproduced exactly.
class RngTracker {
 public:
  virtual ~RngTracker() = default;
  // Seeds the streams of one rank: data_parallel from (seed), model_parallel
  // from (seed, tp_rank) - Megatron's `seed + 2718 + tp_rank` in spirit.
  virtual void seed(std::uint64_t seed, int tp_rank) = 0;
  // A handle to the stream's generator (handles share state: drawing from the
  // returned generator advances the tracker's stream).
  virtual at::Generator generator(RngStream stream) = 0;
  virtual RngSnapshot snapshot() const = 0;
  virtual void restore(const RngSnapshot& snapshot) = 0;
};

// Graph phases (contract.md section 3). The runner decides which phase a region
// is in; the model asks it to run a region. Interface only in this slice: the
// reference's CPU emulation and the CUDA runner come with the graph work.
class GraphRunner {
 public:
  virtual ~GraphRunner() = default;
  // Runs `region` (a graphed layer, or the whole iteration) under the runner's
  // phase rules. The eager runner simply calls `body`.
  virtual void run(const std::string& region_name, const std::function<void()>& body) = 0;
  // The phase the innermost running region is in (eager outside any region).
  virtual GraphPhase phase() const = 0;
};

// The runner every backend may use when graphs are off: runs the body, once.
class EagerGraphRunner final : public GraphRunner {
 public:
  void run(const std::string&, const std::function<void()>& body) override { body(); }
  GraphPhase phase() const override { return GraphPhase::eager; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The collective transport this backend's communicators use ("gloo", "nccl"),
  // as registered with register_transport_factory.
  virtual std::string_view transport_name() const = 0;

  // ---- primitive ops (all differentiable) ----
  // x @ w^T (+ b). x [..., in], w [out, in], b [out] or an undefined tensor.
  virtual at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) const = 0;
  // Normalization over the last dim. The statistics are computed in at least
  // fp32 (fp64 stays fp64); the result has the weight's dtype.
  virtual at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, double eps) const = 0;
  virtual at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight,
                              double eps) const = 0;
  // Causal core attention. q [sq, b, np, hn], k and v [sk, b, np, hn];
  // q_positions [sq] and k_positions [sk] are int64 GLOBAL sequence positions
  // (so a CP rank holding non-contiguous chunks masks correctly): query i sees
  // key j iff k_positions[j] <= q_positions[i]. Scores scaled by `scale`,
  // softmax in at least fp32. Returns the context [sq, b, np * hn] (Megatron's
  // core-attention output layout), in q's dtype.
  virtual at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v, const at::Tensor& q_positions,
                                      const at::Tensor& k_positions, double scale) const = 0;
  // tanh-free GeLU (erf form, torch.nn.functional.gelu's default).
  virtual at::Tensor gelu(const at::Tensor& x) const = 0;
  // x [..., 2f] -> silu(x[..., :f]) * x[..., f:]  (Megatron's swiglu on the
  // local fc1 output; the model lays each TP shard out as [gate_r; up_r]).
  virtual at::Tensor swiglu(const at::Tensor& x) const = 0;
  // residual + dropout(x + bias, p) with masks drawn from `generator`; x and
  // bias are upcast to the residual's dtype first (fp32 residual connection).
  // `bias` may be undefined. With !training or p == 0 no random numbers are
  // drawn.
  virtual at::Tensor bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                                      const at::Tensor& residual, double p, bool training,
                                      at::Generator& generator) const = 0;
  // dropout(x, p) alone (embedding dropout), masks from `generator`.
  virtual at::Tensor dropout(const at::Tensor& x, double p, bool training,
                             at::Generator& generator) const = 0;
  // weight[ids]: ids int64 of any shape, weight [n, h] -> [..., h].
  virtual at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight) const = 0;

  // ---- hooks ----
  // A fresh tracker for one rank (each rank owns its generators).
  virtual std::unique_ptr<RngTracker> make_rng_tracker() const = 0;
  // The graph runner for one rank. Defaults to the eager runner.
  virtual std::unique_ptr<GraphRunner> make_graph_runner() const {
    return std::make_unique<EagerGraphRunner>();
  }
};

}  // namespace parity
