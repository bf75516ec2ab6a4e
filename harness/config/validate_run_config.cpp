// validate_run_config: the field table's range rules, the model's own rules
// (ModelConfig::violations, mapped onto RunConfig's keys) and the run's rules
// (world size, metrics, faults, backend, output folders).
#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"
#include "harness/base/files.h"
#include "harness/config/launch_mapping.h"
#include "harness/config/model_mapping.h"
#include "harness/config/resume_layout.h"
#include "harness/config/run_config.h"
#include "harness/config/run_config_fields.h"
#include "harness/metrics/metric_names.h"
#include "harness/model/sequence_packing.h"
#include "harness/runtime/runtime_faults.h"

namespace parity {
namespace {

inline constexpr int kMaxWorldSize = 64;

using Kind = ConfigViolation::Kind;

Kind kind_of(const std::string& key) {
  const RunConfigField* f = find_run_config_field(key);
  if (!f) return Kind::number;
  switch (f->type) {
    case FieldType::flag:
      return Kind::flag;
    case FieldType::text:
    case FieldType::choice:
    case FieldType::text_list:
      return Kind::text;
    default:
      return Kind::number;
  }
}

// ModelConfig's field names -> RunConfig's keys.
std::string run_key(const std::string& model_field) {
  static const std::map<std::string, std::string> keys = {
      {"ffn_hidden", "ffn-hidden"},
      {"micro_batch", "micro-batch"},
      {"num_query_groups", "num-query-groups"},
      {"kv_channels", "kv-channels"},
      {"qk_layernorm", "qk-layernorm"},
      {"sequence_parallel", "sp"},
      {"recompute_layers", "recompute-layers"},
      {"recompute_modules", "recompute"},
      {"graph_warmup", "graph-warmup"},
      {"graph_scope", "graph-scope"},
      {"position_embedding", "position-embedding"},
      {"rotary_base", "rotary-base"},
      {"rotary_percent", "rotary-percent"},
      {"rotary_interleaved", "rotary-interleaved"},
      {"norm_eps", "norm-epsilon"},
      {"moe_experts", "moe-experts"},
      {"moe_expert_tp", "etp"},
      {"moe_topk", "moe-topk"},
      {"moe_score", "moe-score"},
      {"moe_ffn_hidden", "moe-ffn-hidden"},
      {"moe_layers", "moe-layers"},
      {"moe_aux_loss", "moe-aux-loss"},
      {"moe_seq_aux_loss", "moe-seq-aux-loss"},
      {"moe_z_loss", "moe-z-loss"},
      {"moe_per_layer_logging", "moe-per-layer-logging"},
      {"moe_expert_bias", "moe-expert-bias"},
      {"moe_capacity_factor", "moe-capacity-factor"},
      {"moe_shared_expert_ffn", "moe-shared-expert-ffn"},
      {"moe_force_routing", "moe-force-routing"},
      {"padding_fraction", "padding-fraction"},
      {"mtp_layers", "mtp-layers"},
      {"mtp_repeated_layer", "mtp-repeated-layer"},
      {"observe_wgrad", "observe-wgrad"},
      {"packed_seq_lengths", "packed-seq-lengths"}};
  const auto it = keys.find(model_field);
  return it == keys.end() ? model_field : it->second;
}

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::vector<ConfigViolation> validate_run_config(const RunConfig& c) {
  std::vector<ConfigViolation> out;
  const nlohmann::json values = to_json(c);
  auto text_of = [&](const std::string& key) {
    return values.contains(key) ? field_value_text(values[key]) : std::string();
  };
  auto has = [&](const std::string& key) {
    return std::any_of(out.begin(), out.end(),
                       [&](const ConfigViolation& v) { return v.field == key; });
  };
  auto add = [&](const std::string& key, std::string rule, std::vector<std::string> involves = {}) {
    out.push_back({key, text_of(key), std::move(rule), kind_of(key), std::move(involves)});
  };

  // Every numeric field's range (field table).
  for (const RunConfigField& f : run_config_fields())
    if (f.range && !f.range->contains(f.get(c).get<double>()))
      add(std::string(f.key), std::string(f.range->rule));

  const bool sizes_ok = !has("tp") && !has("cp") && !has("dp") && !has("pp");
  const long long world = sizes_ok ? static_cast<long long>(c.tp) * c.cp * c.dp * c.pp : 0;
  if (sizes_ok && world > kMaxWorldSize)
    add(c.pp > 1 ? "pp" : "dp",
        "world size tp*cp*dp" + std::string(c.pp > 1 ? "*pp" : "") + " = " + std::to_string(c.tp) +
            "*" + std::to_string(c.cp) + "*" + std::to_string(c.dp) +
            (c.pp > 1 ? "*" + std::to_string(c.pp) : std::string()) + " = " +
            std::to_string(world) + " exceeds the maximum of " + std::to_string(kMaxWorldSize),
        c.pp > 1 ? std::vector<std::string>{"tp", "cp", "dp"}
                 : std::vector<std::string>{"tp", "cp"});

  // The pipeline schedule's microbatch rules (interleaved 1F1B).
  if (!has("pp") && !has("vpp") && !has("microbatches")) {
    for (const PipelineLayoutViolation& v : validate_pipeline_schedule(c.pp, c.vpp, c.microbatches))
      add(v.field, v.rule, {"pp", "vpp"});
  }

  // Expert parallelism re-slices the cp x dp ranks (Megatron's expert rank order
  // tp-ep-edp), so it must divide them; with an expert TP size of its own the
  // expert layout etp x ep tiles the tp x cp x dp ranks of a stage
  // (initialize_model_parallel's "world_size is not divisible by
  // expert_tensor_model_pipeline_parallel size").
  const bool own_etp = c.etp > 0 && c.etp != c.tp;
  if (!has("ep") && !has("cp") && !has("dp") && !own_etp &&
      (static_cast<long long>(c.cp) * c.dp) % c.ep != 0)
    add("ep",
        "must divide cp*dp = " + std::to_string(c.cp) + "*" + std::to_string(c.dp) + " = " +
            std::to_string(static_cast<long long>(c.cp) * c.dp),
        {"cp", "dp"});
  const long long stage = static_cast<long long>(c.tp) * c.cp * c.dp;
  if (sizes_ok && !has("ep") && !has("etp") && own_etp &&
      stage % (static_cast<long long>(c.etp) * c.ep) != 0)
    add("etp",
        "etp*ep = " + std::to_string(c.etp) + "*" + std::to_string(c.ep) +
            " must divide tp*cp*dp = " + std::to_string(stage) +
            " (Megatron's expert layout tiles each pipeline stage)",
        {"ep", "tp", "cp", "dp"});

  // The model's rules (their one home), with a valid recompute spec to map.
  std::string why;
  RunConfig mappable = c;
  if (!parse_recompute(c.recompute, &why)) {
    add("recompute", why);
    mappable.recompute = "none";
  }
  if (!parse_graph_scope(c.graph_scope, &why)) {
    add("graph-scope", why);
    mappable.graph_scope.clear();
  }
  if (!c.packed_seq_lengths.empty() && !parse_packed_seq_lengths(c.packed_seq_lengths, &why))
    add("packed-seq-lengths", why);
  for (const ModelConfigViolation& m : model_config_from(mappable).violations(
           std::max(c.tp, 0), std::max(c.cp, 0), std::max(c.dp, 0))) {
    const std::string key = run_key(m.field);
    if (has(key)) continue;  // its range rule already said it
    std::vector<std::string> involves;
    for (const std::string& i : m.involves) involves.push_back(run_key(i));
    if (find_run_config_field(key))
      out.push_back({key, text_of(key), m.rule, kind_of(key), involves});
    else
      out.push_back({key, m.value, m.rule, Kind::number, involves});
  }

  // parity's runs are stricter than the model's layout rule: with CP and SP both
  // on, every load-balanced chunk (not only each CP rank's share) splits over tp,
  // as the run validator requires.
  if (!has("seq") && !has("tp") && !has("cp") && c.seq >= 1 && c.cp > 1 && c.sp && c.tp > 1 &&
      c.seq % (2LL * c.cp * c.tp) != 0)
    add("seq",
        "sequence length " + std::to_string(c.seq) +
            " is not divisible by 2*cp*tp = " + std::to_string(2LL * c.cp * c.tp) +
            " (context-parallel load-balanced chunks, each split over tp by sequence parallelism)",
        {"cp", "tp", "sp"});

  // Metrics: known names the model has a site for; no forward metric under
  // full-iteration graphs (contract.md section 3: replays observe nothing).
  if (!c.metrics.empty()) {
    try {
      const KindSet sites = model_source_kinds(mappable);
      bool all_observable = true, any_observed = false;
      for (const MetricSpec& spec : parse_metric_names(c.metrics)) {
        if (spec.source == MetricSource::parameters) continue;  // the driver computes them
        any_observed = true;
        const bool router = spec.kind == SourceKind::router_logits ||
                            spec.kind == SourceKind::router_scores ||
                            spec.kind == SourceKind::router_diagnostics;
        // megatron-reference 7.11: a router inside a captured graph is silent on
        // replay, so its metrics would miss every replayed step. Per-layer graphs
        // capture it with the whole layer or the moe / moe_router scopes.
        const GraphScope scope = model_config_from(mappable).graph_scope;
        if (router && sites.contains(spec.kind) && c.graphs == GraphMode::per_layer &&
            scope.captures_router()) {
          add("metrics",
              "metric " + spec.name + " reads a router site, which per-layer graphs capture (" +
                  (scope.whole_layer() ? std::string("the whole layer")
                                       : "graph-scope " + to_string(scope)) +
                  "): replays would not observe it; use --graph-scope attn or mlp "
                  "(megatron-reference 7.11)",
              {"graphs", "graph-scope"});
          continue;
        }
        if (sites.contains(spec.kind)) continue;
        all_observable = false;
        add("metrics", "metric " + spec.name + " reads " + std::string(to_string(spec.kind)) +
                           ", which the model has no observation site for: it needs " +
                           source_kind_needs(spec.kind));
      }
      if (all_observable && any_observed && c.graphs == GraphMode::full_iteration)
        add("metrics",
            "forward metrics cannot be collected under full-iteration graphs (replays observe "
            "nothing; contract.md section 3): use --graphs none or per-layer",
            {"graphs"});
    } catch (const std::invalid_argument& e) {
      std::string message = e.what();
      const std::string prefix = "--metrics: ";
      if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
      add("metrics", message);
    }
  }

  // Faults: known names, ranks inside the world.
  if (sizes_ok)
    for (ConfigViolation& v : validate_faults(c.inject, static_cast<int>(world)))
      out.push_back(std::move(v));

  const std::vector<std::string> backends = registered_backends();
  if (std::find(backends.begin(), backends.end(), c.backend) == backends.end()) {
    std::string known;
    for (const std::string& b : backends) known += (known.empty() ? "" : ", ") + b;
    // A backend this binary was built without (cuda/ needs a LibTorch with CUDA) is named as such.
    if (c.backend == "cuda")
      add("backend",
          "not built into this parity (configure with -DPARITY_WITH_CUDA=ON against a "
          "LibTorch with CUDA; built: " +
              known + ")");
    else
      add("backend",
          "unknown backend (known: " + (known.empty() ? "none registered" : known) + ")");
  } else if (const std::unique_ptr<Backend> backend = make_backend(c.backend);
             !backend->unavailable_reason().empty()) {
    add("backend", backend->unavailable_reason());
  } else if (c.graphs != GraphMode::none && (c.tp > 1 || c.cp > 1) && c.launch != LaunchMode::env &&
             sizes_ok) {
    // The captured regions (a layer; the whole forward and backward) issue the
    // tp/cp collectives. Under env launch the ranks per host are not known here:
    // the transport refuses a host collective under capture at run time.
    const std::string limit = backend->captured_collectives_limit(static_cast<int>(world),
                                                                  c.launch == LaunchMode::threads);
    if (!limit.empty())
      add("graphs", "the captured regions hold the tp/cp collectives, but on " + c.backend + " " +
                        limit +
                        " (use tp = cp = 1 with graphs here, or one rank per GPU: --launch env "
                        "under torchrun)");
  }

  // Checkpoints (docs/weights.md "Saving and resuming").
  if (c.save_every > 0 && c.save_checkpoint.empty())
    add("save-every", "needs --save-checkpoint DIR (where to save)", {"save-checkpoint"});
  if (!c.resume.empty() && !c.dump.empty())
    add("dump", "records step 0, which a resumed run does not run (drop --resume or --dump)",
        {"resume"});
  if (!c.resume.empty() && !c.load_weights.empty())
    add("resume", "the weights come from the checkpoint: drop --load-weights", {"load-weights"});
  if (c.resume_at > 0 && !has("steps") && c.resume_at >= c.steps)
    add("resume-at",
        "must be below --steps " + std::to_string(c.steps) +
            " (the run trains resume-at steps, saves, and resumes for the rest)",
        {"steps"});
  if (c.resume_at == 0 && !c.resume_layout.empty())
    add("resume-layout", "needs --resume-at K (the step to save and resume at)", {"resume-at"});
  if (c.resume_at > 0 && out.empty()) {
    std::string why;
    const std::optional<RunConfig> resumed = resumed_config(c, &why);
    if (!resumed) {
      add("resume-layout", why);
    } else {
      // The run at the resume layout obeys every rule a run does.
      for (const ConfigViolation& v : validate_run_config(*resumed))
        add("resume-layout", "at the resume layout, " + v.field + " " + v.value + ": " + v.rule);
    }
  }

  // Output files: their folder must exist, so a long run does not end in a write error.
  for (const char* key : {"report", "trace", "dump", "save-checkpoint"}) {
    const std::string path = text_of(key);
    if (!path.empty() && !files::is_directory(folder_of(path)))
      add(key, "folder " + folder_of(path) + " does not exist");
  }
  return out;
}

}  // namespace parity
