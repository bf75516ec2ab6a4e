#include "harness/config/run_config_fields.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/base/nearest_names.h"

namespace parity {
namespace {

constexpr std::string_view kRuntime = "Parallel layout and runtime";
constexpr std::string_view kModel = "Model";

[[noreturn]] void type_error(std::string_view key, const nlohmann::json& v,
                             const std::string& expected) {
  throw ConfigParseError("\"" + std::string(key) + "\" = " + v.dump() + ": expected " + expected);
}

RunConfigField make(std::string_view key, FieldType type, std::string_view group,
                    std::string_view help, std::optional<NumericRange> range = std::nullopt) {
  RunConfigField f;
  f.key = key;
  f.type = type;
  f.group = group;
  f.help = help;
  f.range = range;
  return f;
}

RunConfigField named(RunConfigField f, std::string_view value_name) {
  f.value_name = value_name;
  return f;
}

NumericRange at_least(double lo, std::string_view rule) {
  NumericRange r;
  r.lo = lo;
  r.rule = rule;
  return r;
}

NumericRange above(double lo, std::string_view rule) {
  NumericRange r = at_least(lo, rule);
  r.lo_open = true;
  return r;
}

RunConfigField integer(std::string_view key, int RunConfig::*m, std::string_view group,
                       std::string_view help, NumericRange range) {
  RunConfigField f = make(key, FieldType::integer, group, help, range);
  f.get = [m](const RunConfig& c) { return nlohmann::json(c.*m); };
  f.set = [m, key](RunConfig& c, const nlohmann::json& v) {
    if (!v.is_number_integer()) type_error(key, v, "an integer");
    const bool fits =
        v.is_number_unsigned()
            ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
            : v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                  v.get<std::int64_t>() <= std::numeric_limits<int>::max();
    if (!fits) type_error(key, v, "an integer that fits in 32 bits");
    c.*m = static_cast<int>(v.get<std::int64_t>());
  };
  return f;
}

RunConfigField real(std::string_view key, double RunConfig::*m, std::string_view group,
                    std::string_view help, NumericRange range) {
  RunConfigField f = make(key, FieldType::real, group, help, range);
  f.get = [m](const RunConfig& c) { return nlohmann::json(c.*m); };
  f.set = [m, key](RunConfig& c, const nlohmann::json& v) {
    if (!v.is_number()) type_error(key, v, "a number");
    c.*m = v.get<double>();
  };
  return f;
}

RunConfigField flag(std::string_view key, bool RunConfig::*m, std::string_view group,
                    std::string_view help) {
  RunConfigField f = make(key, FieldType::flag, group, help);
  f.get = [m](const RunConfig& c) { return nlohmann::json(c.*m); };
  f.set = [m, key](RunConfig& c, const nlohmann::json& v) {
    if (!v.is_boolean()) type_error(key, v, "true or false");
    c.*m = v.get<bool>();
  };
  return f;
}

RunConfigField text(std::string_view key, std::string RunConfig::*m, std::string_view group,
                    std::string_view help) {
  RunConfigField f = make(key, FieldType::text, group, help);
  f.get = [m](const RunConfig& c) { return nlohmann::json(c.*m); };
  f.set = [m, key](RunConfig& c, const nlohmann::json& v) {
    if (!v.is_string()) type_error(key, v, "a string");
    c.*m = v.get<std::string>();
  };
  return f;
}

// An enum option: its spellings from its one table (option_names, ADL).
template <typename E>
RunConfigField choice(std::string_view key, E RunConfig::*m, std::string_view group,
                      std::string_view help) {
  constexpr auto known = known_options<E>;
  constexpr auto parse = parse_option<E>;
  RunConfigField f = make(key, FieldType::choice, group, help);
  f.choices = known;
  f.get = [m](const RunConfig& c) { return nlohmann::json(std::string(to_string(c.*m))); };
  f.set = [m, key, known, parse](RunConfig& c, const nlohmann::json& v) {
    const std::optional<E> e = v.is_string() ? parse(v.get<std::string>()) : std::nullopt;
    if (!e) type_error(key, v, "one of " + known());
    c.*m = *e;
  };
  return f;
}

RunConfigField list(std::string_view key, std::vector<std::string> RunConfig::*m,
                    std::string_view group, std::string_view help, bool comma_separated,
                    const std::string& what) {
  RunConfigField f = make(key, FieldType::text_list, group, help);
  f.comma_separated = comma_separated;
  f.get = [m](const RunConfig& c) { return nlohmann::json(c.*m); };
  f.set = [m, key, what](RunConfig& c, const nlohmann::json& v) {
    if (!v.is_array()) type_error(key, v, what);
    std::vector<std::string> items;
    for (const auto& e : v) {
      if (!e.is_string()) type_error(key, v, what);
      items.push_back(e.get<std::string>());
    }
    c.*m = std::move(items);
  };
  return f;
}

RunConfigField seed_field() {
  RunConfigField f = make("seed", FieldType::seed, kRuntime, "seed of weights, inputs and dropout");
  f.get = [](const RunConfig& c) { return nlohmann::json(c.seed); };
  f.set = [](RunConfig& c, const nlohmann::json& v) {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
      type_error("seed", v, "a non-negative integer");
    c.seed = v.get<std::uint64_t>();
  };
  return f;
}

std::vector<RunConfigField> make_fields() {
  const NumericRange positive = at_least(1, "must be >= 1");
  std::vector<RunConfigField> f;
  // Runtime.
  f.push_back(integer("tp", &RunConfig::tp, kRuntime, "tensor-parallel size", positive));
  f.push_back(integer("cp", &RunConfig::cp, kRuntime, "context-parallel size", positive));
  f.push_back(integer("dp", &RunConfig::dp, kRuntime, "data-parallel size", positive));
  f.push_back(integer("ep", &RunConfig::ep, kRuntime,
                      "expert-parallel size, laid out inside the cp x dp ranks (must divide cp*dp)",
                      positive));
  f.push_back(integer("etp", &RunConfig::etp, kRuntime,
                      "expert tensor-parallel size: the routed experts split over etp ranks "
                      "instead of tp (Megatron's expert_tensor_parallel_size); 0 = tp; etp*ep "
                      "must divide tp*cp*dp",
                      at_least(0, "must be >= 0 (0 = tp)")));
  f.push_back(integer("pp", &RunConfig::pp, kRuntime,
                      "pipeline-parallel size: stages, the slowest index of Megatron's rank order "
                      "(tp, cp, dp, pp); 1F1B schedule",
                      positive));
  f.push_back(integer("vpp", &RunConfig::vpp, kRuntime,
                      "model chunks per pipeline stage: the interleaved 1F1B schedule (needs "
                      "--pp > 1 and microbatches a multiple of pp)",
                      positive));
  f.push_back(integer("pp-first-layers", &RunConfig::pp_first_layers, kRuntime,
                      "decoder layers on the first pipeline stage (0 = an even split; "
                      "Megatron's num_layers_in_first_pipeline_stage)",
                      at_least(0, "must be >= 0")));
  f.push_back(integer("pp-last-layers", &RunConfig::pp_last_layers, kRuntime,
                      "decoder layers on the last pipeline stage (0 = an even split; Megatron's "
                      "num_layers_in_last_pipeline_stage)",
                      at_least(0, "must be >= 0")));
  f.push_back(flag("pp-account-embedding", &RunConfig::pp_account_embedding, kRuntime,
                   "count the embedding as a layer when splitting stages (Megatron's "
                   "account_for_embedding_in_pipeline_split)"));
  f.push_back(flag("pp-account-loss", &RunConfig::pp_account_loss, kRuntime,
                   "count the loss as a layer when splitting stages (Megatron's "
                   "account_for_loss_in_pipeline_split)"));
  f.push_back(named(text("pp-layout", &RunConfig::pp_layout, kRuntime,
                         "explicit stage layout, chunks separated by |: E embedding, t decoder "
                         "layer, L loss, x*n repeats (Megatron's pipeline_model_parallel_layout, "
                         "e.g. Et*3|t*3|t*2L)"),
                    "LAYOUT"));
  f.push_back(flag("sp", &RunConfig::sp, kRuntime, "sequence parallelism (needs --tp > 1)"));
  f.push_back(choice("launch", &RunConfig::launch, kRuntime,
                     "how ranks run: threads (one process), processes (one per rank), env "
                     "(torchrun/Slurm: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"));
  f.push_back(named(text("backend", &RunConfig::backend, kRuntime,
                         "the backend that runs the model and its collectives (a registered name; "
                         "reference: LibTorch on CPU)"),
                    "NAME"));
  f.push_back(seed_field());
  f.push_back(
      real("timeout", &RunConfig::timeout, kRuntime,
           "seconds without progress before a rank counts as hung; also the Gloo and "
           "store timeout",
           NumericRange{0, true, 24 * 3600.0, false, "must be > 0 and at most 86400 seconds"}));
  f.push_back(named(text("report", &RunConfig::report, kRuntime,
                         "write a JSON report to FILE (atomically; its folder must exist)"),
                    "FILE"));
  f.push_back(named(list("inject", &RunConfig::inject, kRuntime,
                         "inject a fault, repeatable (parity list faults lists them)", false,
                         "an array of strings"),
                    "FAULT"));
  f.push_back(
      flag("check-collectives", &RunConfig::check_collectives, kRuntime,
           "compare (op, dtype, shape, sequence) across each group before every collective"));
  // Model.
  f.push_back(integer("hidden", &RunConfig::hidden, kModel, "hidden size", positive));
  f.push_back(integer("heads", &RunConfig::heads, kModel, "attention heads", positive));
  f.push_back(integer("num-query-groups", &RunConfig::num_query_groups, kModel,
                      "grouped-query attention: key/value heads, each shared by heads / N query "
                      "heads; 1 = multi-query, 0 = heads (Megatron's num_query_groups)",
                      at_least(0, "must be >= 1 (0 = heads: one group per head)")));
  f.push_back(
      integer("kv-channels", &RunConfig::kv_channels, kModel,
              "channels of each attention head (Megatron's kv_channels); 0 = hidden / heads",
              at_least(0, "must be >= 1 (0 = hidden / heads)")));
  f.push_back(flag("qk-layernorm", &RunConfig::qk_layernorm, kModel,
                   "normalize each query and key head over its channels with the model's norm "
                   "(Megatron's qk_layernorm)"));
  f.push_back(integer("ffn-hidden", &RunConfig::ffn_hidden, kModel, "MLP hidden size", positive));
  f.push_back(integer("layers", &RunConfig::layers, kModel, "transformer layers", positive));
  f.push_back(integer("seq", &RunConfig::seq, kModel, "sequence length", positive));
  f.push_back(
      named(text("packed-seq-lengths", &RunConfig::packed_seq_lengths, kModel,
                 "packed sequences: documents of these lengths in every sequence, each padded to a "
                 "multiple of 2 x cp and split over CP per document, positions restarting and "
                 "attention masked per document, padding left out of the loss and the metrics "
                 "(Megatron's THD batches: --reset-position-ids --reset-attention-mask, "
                 "PackedSeqParams qkv_format thd); needs micro-batch 1; \"\" = none"),
            "N,N,..."));
  f.push_back(
      integer("micro-batch", &RunConfig::micro_batch, kModel, "micro-batch size", positive));
  f.push_back(integer("microbatches", &RunConfig::microbatches, kModel,
                      "microbatches per step per DP rank", positive));
  f.push_back(integer("steps", &RunConfig::steps, kModel, "training steps", positive));
  f.push_back(integer("eval-every", &RunConfig::eval_every, kModel,
                      "an evaluation forward (no grad, its own batch) after every N-th step; its "
                      "loss is compared with the single-rank run's (0 = none)",
                      at_least(0, "must be >= 0")));
  f.push_back(integer("vocab", &RunConfig::vocab, kModel, "vocabulary size", positive));
  f.push_back(choice("dtype", &RunConfig::dtype, kModel, "fp32, fp64 (exact checks) or bf16"));
  f.push_back(
      flag("fp32-residual", &RunConfig::fp32_residual, kModel, "keep the residual stream in fp32"));
  f.push_back(real("dropout", &RunConfig::dropout, kModel, "dropout probability in [0, 1)",
                   NumericRange{0, false, 1, true, "must be in [0, 1)"}));
  f.push_back(choice("norm", &RunConfig::norm, kModel, "layernorm or rmsnorm"));
  f.push_back(choice("activation", &RunConfig::activation, kModel, "gelu or swiglu"));
  f.push_back(choice("position-embedding", &RunConfig::position_embedding, kModel,
                     "learned (absolute, a parameter) or rope (Megatron's rotary embedding, "
                     "global positions under CP; --rotary-*)"));
  f.push_back(real("rotary-base", &RunConfig::rotary_base, kModel,
                   "rope: the base of the rotary frequencies base^(-2i/d) (Megatron's rotary_base)",
                   above(0, "must be > 0")));
  f.push_back(real("rotary-percent", &RunConfig::rotary_percent, kModel,
                   "rope: the share of each head's channels rotated, the first "
                   "int(head_dim * P) (Megatron's rotary_percent)",
                   NumericRange{0, true, 1, false, "must be in (0, 1]"}));
  f.push_back(flag("rotary-interleaved", &RunConfig::rotary_interleaved, kModel,
                   "rope: rotate channel pairs (2i, 2i+1) instead of (i, i + d/2) (Megatron's "
                   "rotary_interleaved)"));
  f.push_back(real("norm-epsilon", &RunConfig::norm_epsilon, kModel,
                   "the epsilon of every layernorm / rmsnorm (Megatron's --norm-epsilon, "
                   "layernorm_epsilon)",
                   above(0, "must be > 0")));
  f.push_back(flag("untie", &RunConfig::untie, kModel,
                   "separate output-layer weights (--no-untie: the output layer shares the word "
                   "embeddings, Megatron's share_embeddings_and_output_weights)"));
  f.push_back(flag("bias-linear", &RunConfig::bias_linear, kModel,
                   "biases on the QKV, projection, fc1 and fc2 linears (Megatron's "
                   "add_bias_linear)"));
  f.push_back(
      named(text("recompute", &RunConfig::recompute, kModel,
                 "none, full-uniform, full-block or selective:<modules> (core_attn, layernorm, "
                 "mlp, moe; comma-separated)"),
            "SPEC"));
  f.push_back(integer("recompute-layers", &RunConfig::recompute_layers, kModel,
                      "full-uniform: layers per checkpointed chunk; full-block: the first N layers",
                      positive));
  f.push_back(choice("graphs", &RunConfig::graphs, kModel,
                     "none, per-layer or full-iteration (CUDA-graph phases)"));
  f.push_back(integer("graph-warmup", &RunConfig::graph_warmup, kModel,
                      "eager warmup runs before graph capture", at_least(0, "must be >= 0")));
  f.push_back(named(text("graph-scope", &RunConfig::graph_scope, kModel,
                         "per-layer graphs: the captured modules, comma-separated (attn, mlp, moe, "
                         "moe_router, moe_preprocess; empty = the whole layer; Megatron's "
                         "cuda_graph_scope)"),
                    "MODULES"));
  f.push_back(named(text("trace", &RunConfig::trace, kModel,
                         "write the observation trace as JSONL to FILE (its folder must exist)"),
                    "FILE"));
  f.push_back(
      flag("gather-output", &RunConfig::gather_output, kModel, "gather the logits over TP"));
  f.push_back(choice("runtime-gather-output", &RunConfig::runtime_gather_output, kModel,
                     "the forward's runtime_gather_output: unset, on or off (a value wins over "
                     "--gather-output)"));
  f.push_back(real("lr", &RunConfig::lr, kModel,
                   "learning rate of the training step's optimizer (0: no update)",
                   at_least(0, "must be a finite number >= 0")));
  f.push_back(choice("optimizer", &RunConfig::optimizer, kModel,
                     "sgd (p -= lr * grad) or adam (Megatron's Adam: torch.optim.Adam with bias "
                     "correction, no weight decay; its moments and step are optimizer state)"));
  f.push_back(real("adam-beta1", &RunConfig::adam_beta1, kModel, "Adam's beta1",
                   NumericRange{0, false, 1, true, "must be in [0, 1)"}));
  f.push_back(real("adam-beta2", &RunConfig::adam_beta2, kModel, "Adam's beta2",
                   NumericRange{0, false, 1, true, "must be in [0, 1)"}));
  f.push_back(real("adam-eps", &RunConfig::adam_eps, kModel,
                   "Adam's epsilon, added to the denominator",
                   NumericRange{0, true, 1, false, "must be in (0, 1]"}));
  f.push_back(flag("distributed-optimizer", &RunConfig::distributed_optimizer, kModel,
                   "Megatron's distributed optimizer: the dense parameters' update split flat "
                   "over the DP ranks and all-gathered (FlatShard; docs/model.md)"));
  f.push_back(integer("mtp-layers", &RunConfig::mtp_layers, kModel,
                      "multi-token prediction depths after the decoder, each predicting one "
                      "token further (Megatron's mtp_num_layers; 0 = none)",
                      at_least(0, "must be >= 0")));
  f.push_back(flag("mtp-repeated-layer", &RunConfig::mtp_repeated_layer, kModel,
                   "every MTP depth runs the same MTP layer, its weights shared across the "
                   "depths (Megatron's mtp_use_repeated_layer)"));
  f.push_back(flag("observe-wgrad", &RunConfig::observe_wgrad, kModel,
                   "a weight_gradient observation site per parameter: its microbatch gradient, "
                   "once per backward, fed by gradient hooks (docs/observation-api.md)"));
  // MoE (docs/model.md "MoE layer"). The model's rules (ModelConfig::violations)
  // say which combinations are valid.
  const NumericRange non_negative = at_least(0, "must be >= 0");
  f.push_back(integer("moe-experts", &RunConfig::moe_experts, kModel,
                      "routed experts per MoE layer (>= 2); 0 = dense MLP everywhere",
                      non_negative));
  f.push_back(integer("moe-topk", &RunConfig::moe_topk, kModel, "experts per token", positive));
  f.push_back(choice("moe-score", &RunConfig::moe_score, kModel,
                     "router score function: softmax, sigmoid or sqrt-softplus"));
  f.push_back(integer("moe-ffn-hidden", &RunConfig::moe_ffn_hidden, kModel,
                      "expert MLP hidden size (0 = ffn-hidden)", non_negative));
  f.push_back(
      named(text("moe-layers", &RunConfig::moe_layers, kModel,
                 "which layers are MoE: all, every:N (i % N == 0) or a comma list of indices"),
            "LAYERS"));
  f.push_back(real("moe-aux-loss", &RunConfig::moe_aux_loss, kModel,
                   "switch load-balancing loss coefficient (0 = none)", non_negative));
  f.push_back(flag("moe-seq-aux-loss", &RunConfig::moe_seq_aux_loss, kModel,
                   "the load-balancing loss per sequence, averaged over the microbatch's "
                   "sequences (Megatron's seq_aux_loss); needs --moe-aux-loss > 0"));
  f.push_back(real("moe-z-loss", &RunConfig::moe_z_loss, kModel,
                   "router z-loss coefficient: mean over the valid tokens of "
                   "logsumexp(logits)^2 (Megatron's moe_z_loss_coeff; 0 = none)",
                   non_negative));
  f.push_back(flag("moe-per-layer-logging", &RunConfig::moe_per_layer_logging, kModel,
                   "log every MoE layer's load-balancing loss, z-loss and expert load each "
                   "step as metrics (Megatron's MoE metrics tracker, moe_per_layer_logging)"));
  f.push_back(real("moe-expert-bias", &RunConfig::moe_expert_bias, kModel,
                   "aux-loss-free expert bias update rate per step (0 = no bias)", non_negative));
  f.push_back(real("moe-capacity-factor", &RunConfig::moe_capacity_factor, kModel,
                   "expert capacity factor, tokens over capacity dropped (0 = dropless)",
                   non_negative));
  f.push_back(integer("moe-shared-expert-ffn", &RunConfig::moe_shared_expert_ffn, kModel,
                      "shared expert hidden size, run beside the routed ones (0 = none)",
                      non_negative));
  f.push_back(choice("moe-force-routing", &RunConfig::moe_force_routing, kModel,
                     "tests: none, random (random routing logits) or biased (every token "
                     "prefers the first top-k experts); never applied to what is observed"));
  f.push_back(real("padding-fraction", &RunConfig::padding_fraction, kModel,
                   "trailing padding tokens per sequence, excluded from router observations, "
                   "the aux loss, the z-loss and the expert load, in [0, 1)",
                   non_negative));
  f.push_back(integer("padding-token-shift", &RunConfig::padding_token_shift, kModel,
                      "added (mod vocab) to every padding token's id (parity check's run (h): "
                      "what the router observes must not change)",
                      non_negative));
  f.push_back(
      named(list("metrics", &RunConfig::metrics, kModel,
                 "metrics to collect after every step, comma-separated (docs/metrics.md), e.g. "
                 "layer-residual-contribution-l2,global-output-logits-l2",
                 true, "an array of metric names"),
            "NAME,..."));
  f.push_back(
      named(text("load-weights", &RunConfig::load_weights, kModel,
                 "the weights from FILE (safetensors or a torch.save state dict with Megatron's "
                 "key names; unsharded, or FILE.tp0, FILE.tp1, ... per TP rank; or a Megatron-LM "
                 "legacy checkpoint folder or model_optim_rng.pt, any TP x PP) instead of the "
                 "seeded init (docs/weights.md)"),
            "FILE"));
  f.push_back(
      named(text("load-batch", &RunConfig::load_batch, kModel,
                 "the inputs from FILE (safetensors or torch.save: tokens and labels, int64 "
                 "[global batch, seq]; reused by every step) instead of the seeded batch "
                 "(docs/weights.md)"),
            "FILE"));
  f.push_back(named(text("dump", &RunConfig::dump, kModel,
                         "parity run: write weights, inputs, step 0's logits, per-token loss and "
                         "gradients (safetensors, full), every rank's step 0 observations "
                         "(safetensors, one file per rank) with manifest.json and the trace to DIR "
                         "(replaced atomically; its parent must exist; docs/weights.md)"),
                    "DIR"));
  const std::string_view kCheckpoints = "Checkpoints";
  f.push_back(named(text("save-checkpoint", &RunConfig::save_checkpoint, kCheckpoints,
                         "parity run: save a sharded checkpoint into DIR after the last step "
                         "(DIR/step_<N>, published atomically; its parent must exist; "
                         "docs/weights.md)"),
                    "DIR"));
  f.push_back(integer("save-every", &RunConfig::save_every, kCheckpoints,
                      "parity run: also save after every N-th step (0 = after the last only)",
                      at_least(0, "must be >= 0")));
  f.push_back(named(text("resume", &RunConfig::resume, kCheckpoints,
                         "parity run: resume from the newest checkpoint in DIR (or a step folder) "
                         "at any layout; --steps counts from step 0"),
                    "DIR"));
  f.push_back(integer("resume-at", &RunConfig::resume_at, kCheckpoints,
                      "parity check: train this many steps, save, and resume at --resume-layout "
                      "for the rest (resume_invariance; 0 = no resume)",
                      at_least(0, "must be >= 0")));
  f.push_back(named(text("resume-layout", &RunConfig::resume_layout, kCheckpoints,
                         "parity check: the layout the run resumes at, comma-separated key=value "
                         "of tp, cp, dp, ep, pp, vpp, sp, distributed-optimizer, pp-first-layers, "
                         "pp-last-layers (empty = the scenario's layout)"),
                    "LAYOUT"));
  return f;
}

}  // namespace

bool NumericRange::contains(double v) const {
  if (!std::isfinite(v)) return false;
  const bool above = lo_open ? v > lo : v >= lo;
  const bool below = hi_open ? v < hi : v <= hi;
  return above && below;
}

const std::vector<RunConfigField>& run_config_fields() {
  static const std::vector<RunConfigField> fields = make_fields();
  return fields;
}

const RunConfigField* find_run_config_field(std::string_view key) {
  for (const RunConfigField& f : run_config_fields())
    if (f.key == key) return &f;
  return nullptr;
}

std::string help_type_name(const RunConfigField& field) {
  switch (field.type) {
    case FieldType::integer:
      return "INT";
    case FieldType::seed:
      return "UINT";
    case FieldType::real:
      return "FLOAT";
    case FieldType::flag:
      return "";
    case FieldType::choice: {
      std::string names = field.choices();
      for (std::size_t comma; (comma = names.find(", ")) != std::string::npos;)
        names.erase(comma + 1, 1);
      return "{" + names + "}";
    }
    case FieldType::text:
    case FieldType::text_list:
      return field.value_name.empty() ? "TEXT" : std::string(field.value_name);
  }
  return "TEXT";
}

std::string unknown_run_config_key(std::string_view key) {
  std::vector<std::string> keys;
  for (const RunConfigField& f : run_config_fields()) keys.emplace_back(f.key);
  const std::string nearest = did_you_mean(key, keys);
  return "unknown key \"" + std::string(key) + "\"" + (nearest.empty() ? "" : ": " + nearest) +
         " (parity list options lists the " + std::to_string(keys.size()) + " keys)";
}

std::optional<nlohmann::json> field_value_from_text(const RunConfigField& field,
                                                    const std::vector<std::string>& texts,
                                                    std::string* rule) {
  auto fail = [&](std::string why) -> std::optional<nlohmann::json> {
    if (rule) *rule = std::move(why);
    return std::nullopt;
  };
  if (field.type == FieldType::text_list) return nlohmann::json(texts);
  const std::string t = texts.empty() ? std::string() : texts.back();
  const char* begin = t.c_str();
  char* end = nullptr;
  errno = 0;
  switch (field.type) {
    case FieldType::integer: {
      const long long v = std::strtoll(begin, &end, 10);
      if (t.empty() || *end != '\0' || errno == ERANGE) return fail("expected an integer");
      if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
        return fail("expected an integer that fits in 32 bits");
      return nlohmann::json(static_cast<int>(v));
    }
    case FieldType::seed: {
      // strtoull accepts "-5" and wraps it: the sign is rejected first.
      if (t.find('-') != std::string::npos) return fail("must be a non-negative integer");
      const unsigned long long v = std::strtoull(begin, &end, 10);
      if (t.empty() || *end != '\0') return fail("must be a non-negative integer");
      if (errno == ERANGE) return fail("must be at most 18446744073709551615");
      return nlohmann::json(static_cast<std::uint64_t>(v));
    }
    case FieldType::real: {
      const double v = std::strtod(begin, &end);
      if (t.empty() || *end != '\0' || !std::isfinite(v)) return fail("expected a finite number");
      return nlohmann::json(v);
    }
    case FieldType::flag:
      if (t == "true") return nlohmann::json(true);
      if (t == "false") return nlohmann::json(false);
      return fail("expected true or false");
    case FieldType::choice:  // the spelling is checked where it is mapped
    case FieldType::text:
    case FieldType::text_list:
      return nlohmann::json(t);
  }
  return fail("unknown field type");
}

std::string field_value_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) {
    // The short spelling when it round-trips (2.5, -1, 0.1), else every digit.
    const double v = value.get<double>();
    std::ostringstream shorter;
    shorter << v;
    if (std::strtod(shorter.str().c_str(), nullptr) == v) return shorter.str();
    std::ostringstream full;
    full.precision(std::numeric_limits<double>::max_digits10);
    full << v;
    return full.str();
  }
  if (value.is_array()) {
    std::string out;
    for (const auto& e : value) out += (out.empty() ? "" : ",") + field_value_text(e);
    return out;
  }
  return value.dump();
}

}  // namespace parity
