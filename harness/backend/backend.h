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

#include "harness/backend/graph_mode.h"
#include "harness/observation/graph_phase.h"

namespace c10 {
struct Device;
}  // namespace c10
namespace at {
class Tensor;
struct Generator;
using c10::Device;
}  // namespace at
namespace parity {
struct TensorStatistics;  // tensor_statistics.h
}  // namespace parity

namespace parity {

class Communicator;  // harness/parallel/communicator.h (the floor below)

// Megatron's rotary options (Backend::rotary_embedding).
struct RotarySpec {
  double base = 10000.0;     // rotary_base
  std::int64_t dim = 0;      // RotaryEmbedding's dim: int(hn * rotary_percent); 0 = hn
  bool interleaved = false;  // rotary_interleaved
};

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

// Graphs (contract.md section 3, docs/graph-phases.md). The model asks its
// backend's runner to run each graphed region and each iteration; the runner
// decides the phase (harness/observation/graph_phase.h) and how a capture and
// a replay execute. harness/graphs/PhasedGraphRunner implements the phase
// state machine every backend shares; the reference emulates capture/replay on
// the CPU, a CUDA runner would use stream capture and graph launches.
// GraphMode: graph_mode.h.

struct GraphSettings {
  GraphMode mode = GraphMode::none;
  std::int64_t warmup = 1;    // K: eager warmup runs (per layer) or iterations (full)
  RngTracker* rng = nullptr;  // put back after warmup and capture
};

// A graphed region's host code: static inputs in, outputs out.
using RegionFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

class GraphRunner {
 public:
  virtual ~GraphRunner() = default;
  // Whether this runner can run `mode` (the model rejects the config otherwise).
  virtual bool supports(GraphMode mode) const = 0;
  virtual void configure(const GraphSettings& settings) = 0;

  // ---- regions with static inputs and outputs (per-layer graphs) ----
  // Runs region `name` (host code `fn`) on `inputs` under the phase rules: the
  // outputs of a replay live in the region's static output buffers (clones when
  // `clone_outputs`, as Megatron hands out for the last layer). Without
  // per-layer graphs: fn(inputs).
  virtual std::vector<at::Tensor> run_region(const std::string& name, const RegionFn& fn,
                                             const std::vector<at::Tensor>& inputs,
                                             bool clone_outputs) = 0;
  // After each training step: the first call after a recorded step creates the
  // graphs (warmup + capture of every region). Otherwise nothing.
  virtual void end_step() = 0;

  // ---- whole-iteration capture ----
  // Static gradient buffers for a captured backward: the parameters whose
  // values and .grad a captured iteration must leave where they are (a CUDA
  // runner hands the .grad buffers its captured backward writes back to them
  // after every replay; the reference, whose capture runs kernels on the host,
  // puts values and gradients back after the capture). Also the model's
  // persistent buffers that a forward writes in place (an MoE router's step
  // counters): they have no .grad, and the reference puts their values back.
  virtual void set_static_parameters(const std::vector<at::Tensor>& parameters) = 0;
  // Runs one iteration (forward and backward of every microbatch) of `body` on
  // `inputs`, the iteration's batch: eager, captured (between
  // begin_iteration_capture and end_iteration_capture) then replayed, or
  // replayed. A captured iteration reads its inputs from static buffers that
  // every replay refills, so `body` must take everything that changes between
  // iterations from `inputs` (never from host state), must not synchronize
  // with the host, and returns its results: after a replay they are the static
  // output buffers, valid until the next replay (read them before that).
  virtual std::vector<at::Tensor> run_iteration(const RegionFn& body,
                                                const std::vector<at::Tensor>& inputs) = 0;
  // The model calls this on the first activation of the forward: during a
  // full-iteration capture the contents are undefined from there on.
  virtual void poison_if_capturing(const at::Tensor& t) = 0;
  // The phase the innermost running region is in (eager outside any region).
  virtual GraphPhase phase() const = 0;

 protected:
  // The bracket around the one host execution of a captured iteration: a CUDA
  // runner begins stream capture here and ends (instantiates) it in
  // end_iteration_capture; `completed` is false when the body threw (the
  // capture is then abandoned). The reference puts back what its host
  // execution changed.
  virtual void begin_iteration_capture() {}
  virtual void end_iteration_capture(bool completed) {}
};

// The runner of a backend without graphs: every region and iteration runs its
// body once, eagerly.
class EagerGraphRunner final : public GraphRunner {
 public:
  bool supports(GraphMode mode) const override { return mode == GraphMode::none; }
  void configure(const GraphSettings&) override {}
  // Out of line (backend.cpp): returning tensors by value needs at::Tensor complete.
  std::vector<at::Tensor> run_region(const std::string&, const RegionFn& fn,
                                     const std::vector<at::Tensor>& inputs, bool) override;
  void end_step() override {}
  void set_static_parameters(const std::vector<at::Tensor>&) override {}
  std::vector<at::Tensor> run_iteration(const RegionFn& body,
                                        const std::vector<at::Tensor>& inputs) override;
  void poison_if_capturing(const at::Tensor&) override {}
  GraphPhase phase() const override { return GraphPhase::eager; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The collective transport this backend's communicators use ("gloo", "nccl"),
  // as registered with register_transport_factory.
  virtual std::string_view transport_name() const = 0;
  // Where this backend's tensors live: parameters, inputs and positions are
  // made on the CPU from (seed, name) and copied here, so every backend starts
  // from identical values. Default: the CPU (backend.cpp).
  virtual at::Device device() const;
  // Why this backend cannot run here ("no CUDA device is visible ..."), or
  // empty when it can. Run validation turns a reason into a `backend` error
  // (exit 2) before anything launches.
  virtual std::string unavailable_reason() const { return {}; }
  // Why a captured graph region cannot hold collectives when `ranks_on_host`
  // ranks (threads of one process when `ranks_are_threads`) run on this host;
  // empty when it can. Run validation rejects graphs whose captured regions
  // issue collectives (tp or cp > 1) with it. The reference emulates capture on
  // the host: always empty. The CUDA backend: ranks sharing a GPU move tensors
  // through the host, which a stream capture cannot record.
  virtual std::string captured_collectives_limit(int ranks_on_host, bool ranks_are_threads) const {
    return {};
  }

  // ---- primitive ops (all differentiable) ----
  // Each has a default plain-ATen composition (plain_ops.cpp, device-agnostic;
  // the reference keeps them all); a backend overrides the ones it fuses.
  // x @ w^T (+ b). x [..., in], w [out, in], b [out] or an undefined tensor.
  virtual at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) const;
  // Normalization over the last dim. The statistics are computed in at least
  // fp32 (fp64 stays fp64); the result has the weight's dtype.
  virtual at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, double eps) const;
  virtual at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) const;
  // Causal core attention. q [sq, b, np, hn], k and v [sk, b, np, hn];
  // q_positions [sq] and k_positions [sk] are int64 GLOBAL sequence positions
  // (so a CP rank holding non-contiguous chunks masks correctly): query i sees
  // key j iff k_positions[j] <= q_positions[i] and, with packed sequences, both
  // are of one document: q_documents [sq] and k_documents [sk] int64 (Megatron's
  // cu_seqlens), undefined tensors for one document. Scores scaled by `scale`,
  // softmax in at least fp32. Returns the context [sq, b, np * hn] (Megatron's
  // core-attention output layout), in q's dtype.
  virtual at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& q_positions, const at::Tensor& k_positions,
                                      const at::Tensor& q_documents, const at::Tensor& k_documents,
                                      double scale) const;
  // tanh-free GeLU (erf form, torch.nn.functional.gelu's default).
  virtual at::Tensor gelu(const at::Tensor& x) const;
  // x [..., 2f] -> silu(x[..., :f]) * x[..., f:]  (Megatron's swiglu on the
  // local fc1 output; the model lays each TP shard out as [gate_r; up_r]).
  virtual at::Tensor swiglu(const at::Tensor& x) const;
  // residual + dropout(x + bias, p) with masks drawn from `generator`; x and
  // bias are upcast to the residual's dtype first (fp32 residual connection).
  // `bias` may be undefined. With !training or p == 0 no random numbers are
  // drawn.
  virtual at::Tensor bias_dropout_add(const at::Tensor& x, const at::Tensor& bias,
                                      const at::Tensor& residual, double p, bool training,
                                      at::Generator& generator) const;
  // dropout(x, p) alone (embedding dropout), masks from `generator`.
  virtual at::Tensor dropout(const at::Tensor& x, double p, bool training,
                             at::Generator& generator) const;
  // weight[ids]: ids int64 of any shape, weight [n, h] -> [..., h].
  virtual at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight) const;

  // ---- coarser ops, each with a default composition of the ops above and
  // Megatron's mappings (default_ops.cpp; the reference uses the defaults), for
  // a backend that wants one kernel. `tp` / `cp` null means a group of one. ----
  // Megatron's vocab-parallel embedding: this rank holds rows
  // [vocab_start, vocab_start + weight.size(0)); ids outside look up row 0 and
  // are zeroed; the all-reduce over TP assembles the full embedding [..., h].
  virtual at::Tensor vocab_parallel_embedding(const at::Tensor& ids, const at::Tensor& weight,
                                              std::int64_t vocab_start, Communicator* tp) const;
  // Megatron's vocab-parallel cross entropy: per-token loss [...] (fp32, or
  // fp64 for fp64 logits) from logits [..., V_local] whose columns start at
  // vocab_start (0 and tp null for gathered logits).
  virtual at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits,
                                                  const at::Tensor& labels,
                                                  std::int64_t vocab_start, Communicator* tp) const;
  // The QKV split of Megatron's grouped layout (per query group: its np/ng
  // queries, then its key, then its value; ng = np without grouping): mixed
  // [s, b, ng * (np/ng + 2) * hn] -> q [s, b, np, hn], k and v [s, b, ng, hn].
  virtual std::vector<at::Tensor> split_qkv(const at::Tensor& mixed, std::int64_t head_dim,
                                            std::int64_t groups) const;
  // Megatron's rotary position embedding (RotaryEmbedding and the unfused
  // apply_rotary_pos_emb): x [s, b, np, hn] with positions [s] (int64, GLOBAL,
  // so a CP rank's chunks rotate as in the whole sequence). Frequencies
  // f = base^(-arange(0, dim, 2) / dim) (dim: RotaryEmbedding's, 0 = hn) and
  // the angles positions * f in fp32, laid out [f, f] or, interleaved,
  // [f0, f0, f1, f1, ...]; cos and sin cast to x's dtype. The first
  // r = 2 * len(f) channels become t * cos + rotate_half(t) * sin with
  // rotate_half(t) = [-t2, t1] (halves) or [-t1, t0, -t3, t2, ...] (interleaved);
  // the channels after r pass through.
  virtual at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& positions,
                                      const RotarySpec& rotary) const;
  // Context parallel: every CP rank's keys and values, all-gathered on dim 0
  // (backward: reduce-scatter), in CP rank order -> {k, v}.
  virtual std::vector<at::Tensor> gather_context_parallel_kv(const at::Tensor& k,
                                                             const at::Tensor& v,
                                                             Communicator& cp) const;

  // ---- metric prepare ----
  // The logical statistics of a non-empty observed tensor in one read
  // (tensor_statistics.h); nothing synchronizes with the host. Default: ATen
  // reductions of x in its accumulation dtype, the ops the logical metrics use
  // one by one (the reference's values, bit for bit); the CUDA backend runs
  // the fused one-read kernel.
  virtual TensorStatistics tensor_statistics(const at::Tensor& x) const;
  // Sums of squares of x viewed as [rows, x.size(-1)] (rows: the product of the
  // leading dims), per row (over the last dim) or per column, in the
  // accumulation dtype: the staged row/column L2 metrics' prepare. Default: the
  // metrics' own ATen composition (bit for bit); the CUDA backend: the
  // deterministic fused kernel.
  virtual at::Tensor sums_of_squares(const at::Tensor& x, bool per_row) const;

  // ---- hooks ----
  // A fresh tracker for one rank (each rank owns its generators).
  virtual std::unique_ptr<RngTracker> make_rng_tracker() const = 0;
  // The graph runner for one rank. Defaults to the eager runner (graphs none only).
  virtual std::unique_ptr<GraphRunner> make_graph_runner() const {
    return std::make_unique<EagerGraphRunner>();
  }
};

}  // namespace parity
