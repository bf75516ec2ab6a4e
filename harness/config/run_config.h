#pragma once
// Everything one parity run is configured by: the parallel layout and runtime
// and the model. One validation function serves the CLI and
// scenario files; one JSON form (keys = the CLI flags without their dashes)
// serves the processes-mode worker hand-off and scenario files.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "harness/backend/graph_mode.h"
#include "harness/model/model_options.h"
#include "harness/runtime/launch_spec.h"  // LaunchMode

namespace parity {

// The model's enum options are the model's own types (model_options.h,
// graph_mode.h: one spelling table each, used by to_string, the parsers and
// --help). What the training loop passes as the forward's
// runtime_gather_output: nothing ("unset", the constructor flag decides), or a
// value that wins.
enum class RuntimeGatherOption { unset, on, off };
inline constexpr OptionNames<RuntimeGatherOption, 3> kRuntimeGatherNames{
    {{RuntimeGatherOption::unset, "unset"},
     {RuntimeGatherOption::on, "on"},
     {RuntimeGatherOption::off, "off"}}};
constexpr const auto& option_names(RuntimeGatherOption) { return kRuntimeGatherNames; }
inline std::string_view to_string(RuntimeGatherOption v) { return option_name(v); }

static_assert(kRuntimeGatherNames.complete());
inline std::string_view to_string(LaunchMode v) { return launch_mode_name(v); }

// `--recompute none | full-uniform | full-block | selective:<m1>[,<m2>...]`.
// The config keeps the spec as written (so validation can name a bad module);
// this is its parsed form.
inline constexpr std::string_view kRecomputeModules[] = {"core_attn", "layernorm", "mlp", "moe"};
struct RecomputeSpec {
  RecomputeKind kind = RecomputeKind::none;
  std::vector<std::string> modules;  // selective only, in the order written
  bool has(std::string_view module) const;
};
// nullopt when the spec is invalid; `why` (when given) receives the rule broken.
std::optional<RecomputeSpec> parse_recompute(std::string_view spec, std::string* why = nullptr);

struct RunConfig {
  // --- parallel layout and runtime
  int tp = 1;
  int cp = 1;
  int dp = 1;
  int ep = 1;  // expert parallel, inside cp x dp; divides cp*dp
  // Expert tensor parallel (Megatron's expert_tensor_parallel_size); 0 = tp.
  // etp*ep divides tp*cp*dp.
  int etp = 0;
  // Pipeline parallelism (docs/model.md "Pipeline layer placement" and "Pipeline
  // schedules"): stages, model chunks per stage, and Megatron's placement options.
  int pp = 1;
  int vpp = 1;
  int pp_first_layers = 0;  // decoder layers on the first stage; 0 = Megatron's None
  int pp_last_layers = 0;   // on the last stage; 0 = Megatron's None
  bool pp_account_embedding = false;
  bool pp_account_loss = false;
  std::string pp_layout;  // Megatron's pipeline_model_parallel_layout; "" = none
  bool sp = false;        // sequence parallelism (needs tp > 1)
  LaunchMode launch = LaunchMode::threads;
  std::string backend = "reference";  // a registered backend (harness/backend/registry.h)
  std::uint64_t seed = 1234;
  double timeout = 60.0;            // seconds: no-progress limit and Gloo timeout
  std::string report;               // JSON report path; "" = none
  std::vector<std::string> inject;  // fault specs, e.g. "crash-rank=1"
  bool check_collectives = false;   // collective fingerprints

  // --- model; small defaults so a default run is quick
  int hidden = 64;
  int heads = 4;
  int num_query_groups = 0;   // grouped-query attention; 0 = heads
  int kv_channels = 0;        // attention head dimension; 0 = hidden / heads
  bool qk_layernorm = false;  // a norm over each query and key head
  int ffn_hidden = 256;
  int layers = 2;
  int seq = 16;
  // Packed sequences: "5,11,8" puts documents of those lengths in every
  // sequence (Megatron's THD batches); "" = one document per sequence.
  std::string packed_seq_lengths;
  int micro_batch = 2;
  int microbatches = 2;  // per DP rank (see docs/cli.md)
  int steps = 2;
  int eval_every = 0;  // an evaluation forward after every N-th step (0 = none)
  int vocab = 128;
  ModelDType dtype = ModelDType::fp32;
  bool fp32_residual = false;
  double dropout = 0.0;
  NormKind norm = NormKind::layer_norm;
  ActivationKind activation = ActivationKind::gelu;
  PositionEmbeddingKind position_embedding = PositionEmbeddingKind::learned;
  double rotary_base = 10000.0;     // rope: Megatron's rotary_base
  double rotary_percent = 1.0;      // rope: the share of each head's channels rotated
  bool rotary_interleaved = false;  // rope: pairs (2i, 2i+1) instead of (i, i + d/2)
  double norm_epsilon = 1e-5;       // every norm's epsilon (Megatron's layernorm_epsilon)
  bool untie = true;                // false: output layer shares the word embeddings
  bool bias_linear = true;          // biases on QKV, proj, fc1, fc2
  std::string recompute = "none";   // see RecomputeSpec
  int recompute_layers = 1;         // full-uniform: layers per chunk; full-block: first N
  GraphMode graphs = GraphMode::none;
  int graph_warmup = 1;
  std::string
      graph_scope;    // per-layer graphs: captured modules (parse_graph_scope; "" = whole layer)
  std::string trace;  // JSONL trace path; "" = none
  bool gather_output = false;  // output layer gathers logits over TP
  RuntimeGatherOption runtime_gather_output =
      RuntimeGatherOption::unset;      // wins over gather_output
  double lr = 0.1;                     // learning rate of the step driver (0: no update)
  bool distributed_optimizer = false;  // the update split flat over DP (FlatShard)
  // The optimizer (harness/model/optimizer.h): SGD, or Adam with bias correction.
  OptimizerKind optimizer = OptimizerKind::sgd;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  // --- multi-token prediction (docs/model.md "Multi-token prediction")
  int mtp_layers = 0;               // MTP depths (Megatron's mtp_num_layers); 0 = none
  bool mtp_repeated_layer = false;  // every depth runs one shared MTP layer
  // Every parameter's weight_gradient site (parity probe, fed by gradient hooks).
  bool observe_wgrad = false;
  // --- MoE layers (docs/model.md "MoE layer"); moe_experts 0 = dense everywhere
  int moe_experts = 0;
  int moe_topk = 2;
  RouterScore moe_score = RouterScore::softmax;
  int moe_ffn_hidden = 0;              // 0 = ffn_hidden
  std::string moe_layers = "all";      // all | every:N | comma list of layer indices
  double moe_aux_loss = 0.0;           // switch load-balancing loss coefficient
  bool moe_seq_aux_loss = false;       // per sequence (Megatron's seq_aux_loss), not per microbatch
  double moe_z_loss = 0.0;             // router z-loss coefficient (Megatron's moe_z_loss_coeff)
  bool moe_per_layer_logging = false;  // log each MoE layer's losses and expert load per step
  double moe_expert_bias = 0.0;        // aux-loss-free bias update rate
  double moe_capacity_factor = 0.0;    // 0 = dropless
  int moe_shared_expert_ffn = 0;       // 0 = no shared expert
  ForcedRouting moe_force_routing = ForcedRouting::none;
  double padding_fraction = 0.0;  // trailing padding tokens per sequence (router only)
  // Added (mod vocab) to every padding token's id: router_invariance's run (h).
  int padding_token_shift = 0;
  // --metrics names (docs/metrics.md); empty = no metric collector. Checked by
  // parse_metric_names; forward metrics are rejected under full-iteration graphs.
  std::vector<std::string> metrics;
  // --- inputs from files (docs/weights.md); "" = seeded
  std::string load_weights;  // safetensors / torch.save state dict, or FILE.tp{r}
  std::string load_batch;    // safetensors: tokens, labels int64 [rows, seq]
  std::string dump;          // parity run --dump DIR; "" = none
  // --- checkpoints (docs/weights.md "Saving and resuming")
  std::string save_checkpoint;  // parity run: save into DIR after the last step; "" = none
  int save_every = 0;           // also after every N-th step (0 = the last only)
  std::string resume;           // parity run: resume from DIR (its newest checkpoint)
  // parity check's resume_invariance: train resume_at steps, save, resume at
  // resume_layout ("tp=1,dp=2"; "" = the scenario's layout) for the rest.
  int resume_at = 0;
  std::string resume_layout;

  int world_size() const { return tp * cp * dp * pp; }
  // The same run without pipeline parallelism (pp 1 and every placement option
  // at its default): the single-rank and memory-estimate runs.
  void clear_pipeline();
  // Parsed recompute spec; call only on a validated config (throws otherwise).
  RecomputeSpec recompute_spec() const;
  // Global batch per step: micro_batch * microbatches * dp sequences.
  long long global_batch() const { return static_cast<long long>(micro_batch) * microbatches * dp; }
};

bool operator==(const RunConfig& a, const RunConfig& b);
inline bool operator!=(const RunConfig& a, const RunConfig& b) { return !(a == b); }

// ---------------------------------------------------------------- validation

struct ConfigViolation {
  // How the value is spelled in each source: a number, a text (quoted in JSON),
  // a boolean flag (no value on the command line), or an environment variable.
  enum class Kind { number, text, flag, env };
  std::string field;  // the key: "tp", "ffn-hidden", "inject", "WORLD_SIZE"
  std::string value;  // as given: "3", "selective:foo", "true"
  std::string rule;   // "hidden size 64 is not divisible by 3"
  Kind kind = Kind::number;
  // The other keys the rule reads ("tp" for "heads must be divisible by tp"), so
  // a message can say where their values came from.
  std::vector<std::string> involves = {};
};

// Every rule every run needs (contract.md "Bad input"); empty = valid.
// Environment checks of the env launch mode are separate (launcher.h).
std::vector<ConfigViolation> validate_run_config(const RunConfig& config);

// `--tp 3: hidden size 64 is not divisible by 3`
std::string format_for_cli(const ConfigViolation& v);
// `scenario.json: "tp" = 3: hidden size 64 is not divisible by 3`
std::string format_for_file(const ConfigViolation& v, std::string_view source);

// Thrown where a caller needs an exception (launch()); what() is every line.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<ConfigViolation> violations);
  const std::vector<ConfigViolation>& violations() const { return violations_; }

 private:
  std::vector<ConfigViolation> violations_;
};

// ---------------------------------------------------------------- JSON

// Every key, always (so the hand-off is complete). Equality, JSON and the key
// list are driven by the field table (run_config_fields.h).
nlohmann::json to_json(const RunConfig& config);
// Missing keys keep their defaults; an unknown key, a wrong type or an unknown
// enum spelling throws ConfigParseError with one line naming the key and value,
// e.g. `"tp" = "two": expected an integer`. No validation here.
RunConfig run_config_from_json(const nlohmann::json& j);
// The keys, in flag order.
const std::vector<std::string>& run_config_keys();

class ConfigParseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace parity
