#include "harness/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "harness/model/sequence_packing.h"

namespace parity {

std::string to_string(RecomputeModules m) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ",";
    out += name;
  };
  add(m.core_attn, "core_attn");
  add(m.layernorm, "layernorm");
  add(m.mlp, "mlp");
  add(m.moe, "moe");
  return out;
}
RecomputeModules parse_recompute_modules(std::string_view list) {
  RecomputeModules m;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item == "core_attn") {
      m.core_attn = true;
    } else if (item == "layernorm") {
      m.layernorm = true;
    } else if (item == "mlp") {
      m.mlp = true;
    } else if (item == "moe") {
      m.moe = true;
    } else {
      throw ModelConfigError("recompute_modules", std::string(item),
                             "unknown module (known: core_attn, layernorm, mlp, moe)");
    }
  }
  return m;
}

ModelConfigError::ModelConfigError(const std::string& field, const std::string& value,
                                   const std::string& rule)
    : std::invalid_argument("model config: " + field + " = " + value + ": " + rule),
      field_(field),
      rule_(rule) {}

namespace {
template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

namespace {
// Grouped-query attention (docs/model.md "Attention"): Megatron's rules, in its words.
template <typename Add>
void query_group_violations(const ModelConfig& c, int tp, Add&& add) {
  const std::int64_t g = c.num_query_groups;
  if (g < 0) {
    add("num_query_groups", str(g), "must be >= 1 (0 = heads: one group per head)");
    return;
  }
  if (g > c.heads || c.heads % c.query_groups() != 0) {
    add("num_query_groups", str(g),
        "must divide heads (" + str(c.heads) + "): each group shares its key and value with " +
            "heads / num_query_groups query heads",
        {"heads"});
    return;
  }
  const std::int64_t groups = c.query_groups();
  if (c.heads % tp != 0) return;  // the heads' own rule says it (and groups = heads by default)
  // TransformerConfig.__post_init__.
  if (groups % tp != 0 && tp % groups != 0) {
    add("num_query_groups", str(groups),
        "must be a multiple or divisor of tp (" + str(tp) +
            ") (Megatron: \"num_query_groups must be a multiple or divisor of "
            "tensor_model_parallel_size\")",
        {"tp"});
    return;
  }
  // With fewer groups than TP ranks Megatron's ColumnParallelLinear still splits
  // linear_qkv's rows evenly over TP (divide() asserts they divide).
  if (groups < tp && c.head_dim() > 0 && c.qkv_width() % tp != 0)
    add("num_query_groups", str(groups),
        "linear_qkv's width (heads + 2 * num_query_groups) * head_dim = " + str(c.qkv_width()) +
            " is not divisible by tp (" + str(tp) +
            ") (Megatron's ColumnParallelLinear splits it evenly over TP)",
        {"heads", c.kv_channels > 0 ? "kv_channels" : "hidden", "tp"});
}
}  // namespace

namespace {
// The MoE rules (docs/model.md "MoE layer").
template <typename Add>
void moe_violations(const ModelConfig& c, int tp, int ep, Add&& add) {
  const MoeConfig& m = c.moe;
  if (m.experts < 0) {
    add("moe_experts", str(m.experts), "must be >= 2 (0 = no MoE layer)");
    return;
  }
  if (!m.enabled()) {
    // Every MoE option needs experts: a lone one is a mistake, not a default.
    const MoeConfig dense;
    auto needs_experts = [&](const char* field, bool set, const std::string& value) {
      if (set)
        add(field, value, "needs moe_experts >= 2 (the model has no MoE layer)", {"moe_experts"});
    };
    needs_experts("moe_topk", m.topk != dense.topk, str(m.topk));
    needs_experts("moe_score", m.score != dense.score, std::string(to_string(m.score)));
    needs_experts("moe_ffn_hidden", m.ffn_hidden != dense.ffn_hidden, str(m.ffn_hidden));
    needs_experts("moe_layers", m.layers != dense.layers, m.layers);
    needs_experts("moe_aux_loss", m.aux_loss_coef != dense.aux_loss_coef, str(m.aux_loss_coef));
    needs_experts("moe_seq_aux_loss", m.seq_aux_loss, "true");
    needs_experts("moe_z_loss", m.z_loss_coef != dense.z_loss_coef, str(m.z_loss_coef));
    needs_experts("moe_per_layer_logging", m.per_layer_logging, "true");
    needs_experts("moe_expert_bias", m.expert_bias_rate != dense.expert_bias_rate,
                  str(m.expert_bias_rate));
    needs_experts("moe_capacity_factor", m.capacity_factor != dense.capacity_factor,
                  str(m.capacity_factor));
    needs_experts("moe_shared_expert_ffn", m.shared_expert_ffn != dense.shared_expert_ffn,
                  str(m.shared_expert_ffn));
    needs_experts("moe_force_routing", m.force_routing != dense.force_routing,
                  std::string(to_string(m.force_routing)));
    needs_experts("padding_fraction", m.padding_fraction != dense.padding_fraction,
                  str(m.padding_fraction));
    needs_experts("ep", ep > 1, str(ep));
    needs_experts("moe_expert_tp", m.expert_tp > 0 && m.expert_tp != tp, str(m.expert_tp));
    if (c.recompute == RecomputeKind::selective && c.recompute_modules.moe)
      add("recompute_modules", to_string(c.recompute_modules),
          "the moe module needs moe_experts >= 2 (the model has no MoE layer)", {"moe_experts"});
    return;
  }
  if (m.experts < 2) {
    add("moe_experts", str(m.experts), "must be >= 2 (0 = no MoE layer)");
    return;
  }
  if (m.topk < 1 || m.topk > m.experts)
    add("moe_topk", str(m.topk), "must be in [1, moe_experts = " + str(m.experts) + "]",
        {"moe_experts"});
  if (ep >= 1 && m.experts % ep != 0)
    add("moe_experts", str(m.experts), "must be divisible by ep (" + str(ep) + ")", {"ep"});
  if (m.ffn_hidden < 0) {
    add("moe_ffn_hidden", str(m.ffn_hidden), "must be >= 0 (0 = ffn_hidden)");
  } else if (m.expert_tp < 0) {
    add("moe_expert_tp", str(m.expert_tp), "must be >= 0 (0 = tp)");
  } else if (c.expert_ffn_hidden() % m.expert_tp_size(tp) != 0) {
    const bool own = m.expert_tp > 0 && m.expert_tp != tp;
    const std::string etp = str(m.expert_tp_size(tp));
    add("moe_ffn_hidden", str(c.expert_ffn_hidden()),
        own ? "must be divisible by etp (" + etp + "): experts are split over etp"
            : "must be divisible by tp (" + etp + "): experts are split over tp",
        {own ? "moe_expert_tp" : "tp"});
  }
  // parity's weight-gradient sites reassemble a shard over tp.
  if (m.expert_tp > 0 && m.expert_tp != tp && c.observe_wgrad)
    add("moe_expert_tp", str(m.expert_tp),
        "--observe-wgrad with experts split over a TP size of their own (etp != tp) is not "
        "supported yet",
        {"observe_wgrad", "tp"});
  if (m.shared_expert_ffn < 0)
    add("moe_shared_expert_ffn", str(m.shared_expert_ffn), "must be >= 0 (0 = none)");
  else if (m.shared_expert_ffn % tp != 0)
    add("moe_shared_expert_ffn", str(m.shared_expert_ffn),
        "must be divisible by tp (" + str(tp) + ")", {"tp"});
  // Megatron: "When using MoE with tensor parallelism, sequence parallelism must be used".
  if (tp > 1 && !c.sequence_parallel)
    add("moe_experts", str(m.experts),
        "MoE with tp > 1 needs sequence parallelism (as Megatron requires)", {"tp", "sp"});
  const auto finite_at_least_zero = [&](const char* field, double v) {
    if (!(v >= 0.0) || !std::isfinite(v)) add(field, str(v), "must be a finite number >= 0");
  };
  finite_at_least_zero("moe_aux_loss", m.aux_loss_coef);
  if (m.seq_aux_loss && !(m.aux_loss_coef > 0))
    add("moe_seq_aux_loss", "true", "needs moe_aux_loss > 0 (it chooses how that loss is taken)",
        {"moe_aux_loss"});
  finite_at_least_zero("moe_z_loss", m.z_loss_coef);
  finite_at_least_zero("moe_expert_bias", m.expert_bias_rate);
  finite_at_least_zero("moe_capacity_factor", m.capacity_factor);
  if (!(m.padding_fraction >= 0.0 && m.padding_fraction < 1.0)) {
    add("padding_fraction", str(m.padding_fraction), "must be in [0, 1)");
  } else if (m.padding_tokens(c.seq) >= c.seq) {
    add("padding_fraction", str(m.padding_fraction),
        "leaves no valid token in a sequence of " + str(c.seq), {"seq"});
  }
  try {
    bool any = false;
    for (std::int64_t i = 0; i < c.layers; ++i) any = m.is_moe_layer(i, c.layers) || any;
    if (!any) add("moe_layers", m.layers, "selects no layer");
  } catch (const ModelConfigError& e) {
    add("moe_layers", m.layers.empty() ? "(empty)" : m.layers, e.rule());
  }
}
}  // namespace

std::int64_t MoeConfig::padding_tokens(std::int64_t seq) const {
  return static_cast<std::int64_t>(std::llround(padding_fraction * static_cast<double>(seq)));
}

bool MoeConfig::is_moe_layer(std::int64_t index, std::int64_t layers_total) const {
  if (!enabled()) return false;
  const auto bad = [&](const std::string& rule) {
    throw ModelConfigError("moe_layers", layers.empty() ? "(empty)" : layers, rule);
  };
  if (layers == "all") return true;
  const std::string every = "every:";
  const auto number = [&](const std::string& text) -> std::int64_t {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
        text.size() > 9)
      bad("expected all, every:N or a comma list of layer indices");
    return std::stoll(text);
  };
  if (layers.rfind(every, 0) == 0) {
    const std::int64_t n = number(layers.substr(every.size()));
    if (n < 1) bad("every:N needs N >= 1");
    return index % n == 0;
  }
  bool found = false;
  std::string item;
  std::istringstream list(layers);
  while (std::getline(list, item, ',')) {
    const std::int64_t i = number(item);
    if (i >= layers_total)
      bad("layer " + item + " does not exist (layers = " + std::to_string(layers_total) + ")");
    found = found || i == index;
  }
  return found;
}

namespace {
// The partial-graph rules (docs/graph-phases.md "Partial graphs").
template <typename Add>
void graph_scope_violations(const ModelConfig& c, Add&& add) {
  const GraphScope& g = c.graph_scope;
  if (g.whole_layer()) return;
  const std::string value = to_string(g);
  if (c.graphs != GraphMode::per_layer) {
    add("graph_scope", value, "needs per-layer graphs (it chooses what a per-layer graph captures)",
        {"graphs"});
    return;
  }
  if (g.moe_preprocess && !g.moe_router)
    add("graph_scope", value, "moe_preprocess needs moe_router (as in Megatron)");
  if (g.moe && g.moe_router)
    add("graph_scope", value,
        "moe captures the whole MoE half and moe_router a part of it: name one");
  if ((g.moe || g.moe_router || g.moe_preprocess) && !c.moe.enabled()) {
    add("graph_scope", value, "moe, moe_router and moe_preprocess need moe_experts >= 2",
        {"moe_experts"});
    return;
  }
  if (g.moe && c.moe.capacity_factor <= 0)
    add("graph_scope", value,
        "moe needs moe_capacity_factor > 0 (Megatron captures the whole MoE half only with "
        "drop-and-pad: a dropless dispatch has no static shapes)",
        {"moe_capacity_factor"});
  // A checkpoint may not span a graph's boundary: under moe_router the pre-MLP
  // norm and the router are in the router graph, their consumers (the experts)
  // eager, the combine in the post-process graph.
  if (g.moe_router && !g.moe && c.recompute == RecomputeKind::selective &&
      (c.recompute_modules.layernorm || c.recompute_modules.moe))
    add("recompute_modules", to_string(c.recompute_modules),
        std::string("the ") + (c.recompute_modules.moe ? "moe" : "layernorm") +
            " checkpoint would span the router graph, the eager experts and the post-process "
            "graph of graph_scope moe_router",
        {"graph_scope"});
}
}  // namespace

// Megatron's placement rules (pipeline_layout.cpp, fields named by their run
// keys), and what parity's pipeline does not run yet, each named.
template <typename Add>
void pipeline_violations(const ModelConfig& c, Add&& add) {
  const std::vector<PipelineLayoutViolation> layout = validate_pipeline_layout(c.pipeline_layout());
  for (const PipelineLayoutViolation& v : layout) add(v.field, v.value, v.rule);
  if (!c.pipelined()) return;
  const std::string not_yet =
      "is not supported with pipeline parallelism yet (pp = " + str(c.pipeline.pp) + ")";
  // The last stage's MTP depths embed with its copy of the word embeddings,
  // which the embedding group syncs; Megatron's position embeddings have no
  // such group (its first stage's only), so a learned copy there would train apart.
  if (c.mtp_layers > 0 && c.position_embedding == PositionEmbeddingKind::learned)
    add("position_embedding", "learned",
        "multi-token prediction with pp > 1 needs rope: the last stage's copy of learned "
        "position embeddings is outside Megatron's embedding group (pp = " +
            str(c.pipeline.pp) + ")",
        {"pp", "mtp_layers"});
  if (c.mtp_layers > 0 && layout.empty() && mtp_standalone(c.pipeline_layout()))
    add("pp-layout", c.pipeline.layout,
        "the MTP layers (m) must be on the last stage with the loss (L): a standalone MTP stage "
        "(Megatron's mtp_standalone) " +
            not_yet,
        {"pp", "mtp_layers"});
}

// Packed sequences: Megatron's THD rules and the combinations parity does not build.
template <typename Add>
void packing_violations(const ModelConfig& c, int cp, Add&& add) {
  if (!c.packed()) return;
  const std::vector<std::int64_t>& lengths = c.packed_seq_lengths;
  std::string text;
  for (std::int64_t l : lengths) text += (text.empty() ? "" : ",") + str(l);
  const char* field = "packed_seq_lengths";
  if (std::any_of(lengths.begin(), lengths.end(), [](std::int64_t l) { return l < 1; })) {
    add(field, text, "every document length must be >= 1");
    return;
  }
  const std::int64_t span = packed_span(lengths, cp);
  if (span > c.seq)
    add(field, text,
        "the documents, each padded to a multiple of " +
            (cp > 1 ? "2*cp = " + str(2 * cp) : std::string("1 (no cp)")) + ", take " + str(span) +
            " positions, more than seq = " + str(c.seq) +
            " (seq is the packed sequence's length, Megatron's --seq-length; the last "
            "document's padding runs to its end)",
        {"seq", "cp"});
  if (c.micro_batch != 1)
    add(field, text,
        "a packed (THD) microbatch is one sequence of documents: needs micro_batch 1 (Megatron's "
        "THD batches), not " +
            str(c.micro_batch),
        {"micro_batch"});
  if (c.mtp_layers > 0)
    add(field, text,
        "multi-token prediction over packed documents is not built in parity (its shift would "
        "cross documents): drop mtp_layers",
        {"mtp_layers"});
  if (c.moe.padding_fraction > 0)
    add(field, text, "the documents' padding is the router's padding mask: drop padding_fraction",
        {"padding_fraction"});
  if (c.pipelined())
    add(field, text, "packed sequences with pipeline stages are not built in parity: needs pp 1",
        {"pp"});
}

// Megatron's RotaryEmbedding rotates the first 2 * ceil(dim / 2) channels of
// each head (pairs i and i + half, or 2i and 2i+1 interleaved): they must fit
// in the head and there must be some. The rotary options without rope would
// change nothing, so they are refused rather than ignored.
template <typename Add>
void rotary_violations(const ModelConfig& c, Add&& add) {
  const bool rope = c.position_embedding == PositionEmbeddingKind::rope;
  if (!(c.rotary_base > 0.0) || !std::isfinite(c.rotary_base))
    add("rotary_base", str(c.rotary_base), "must be > 0");
  if (!(c.rotary_percent > 0.0 && c.rotary_percent <= 1.0))
    add("rotary_percent", str(c.rotary_percent), "must be in (0, 1]");
  if (!rope) {
    const std::string needs = "applies to rotary embeddings only (--position-embedding rope)";
    if (c.rotary_base != 10000.0)
      add("rotary_base", str(c.rotary_base), needs, {"position_embedding"});
    if (c.rotary_percent != 1.0)
      add("rotary_percent", str(c.rotary_percent), needs, {"position_embedding"});
    if (c.rotary_interleaved) add("rotary_interleaved", "true", needs, {"position_embedding"});
    return;
  }
  if (c.kv_channels < 0 || !(c.rotary_percent > 0.0 && c.rotary_percent <= 1.0)) return;
  const std::vector<std::string> head = c.kv_channels > 0
                                            ? std::vector<std::string>{"kv_channels"}
                                            : std::vector<std::string>{"hidden", "heads"};
  const std::string head_text =
      std::string(c.kv_channels > 0 ? "kv_channels" : "hidden / heads") + " = " + str(c.head_dim());
  if (c.rotary_dim() < 1) {
    std::vector<std::string> involves = head;
    involves.push_back("position_embedding");
    add("rotary_percent", str(c.rotary_percent),
        "int(head_dim * rotary_percent) = 0 rotates no channel (" + head_text + ")", involves);
  } else if (c.rotary_channels() > c.head_dim()) {
    // At rotary_percent 1.0 an odd head dimension (below 1.0 d < head_dim).
    add("position_embedding", "rope",
        "rotary embeddings need an even head dimension (" + head_text + ")", head);
  }
}

std::vector<ModelConfigViolation> ModelConfig::violations(int tp, int cp, int dp, int ep) const {
  std::vector<ModelConfigViolation> out;
  auto add = [&](std::string field, std::string value, std::string rule,
                 std::vector<std::string> involves = {}) {
    out.push_back({std::move(field), std::move(value), std::move(rule), std::move(involves)});
  };
  auto at_least_one = [&](const char* field, long long v) {
    if (v < 1) add(field, str(v), "must be >= 1");
  };
  at_least_one("tp", tp);
  at_least_one("cp", cp);
  at_least_one("dp", dp);
  at_least_one("hidden", hidden);
  at_least_one("heads", heads);
  at_least_one("ffn_hidden", ffn_hidden);
  at_least_one("layers", layers);
  at_least_one("seq", seq);
  at_least_one("micro_batch", micro_batch);
  at_least_one("vocab", vocab);
  if (!out.empty()) return out;  // the rules below divide by these

  // Without kv_channels the head dimension is hidden / heads.
  if (kv_channels < 0) add("kv_channels", str(kv_channels), "must be >= 1 (0 = hidden / heads)");
  if (kv_channels == 0 && hidden % heads != 0)
    add("hidden", str(hidden), "must be divisible by heads (" + str(heads) + ")", {"heads"});
  // Tensor parallelism splits the heads (so the hidden size), the ffn and the vocab.
  auto divisible_by_tp = [&](const char* field, std::int64_t v) {
    if (v % tp != 0) add(field, str(v), "must be divisible by tp (" + str(tp) + ")", {"tp"});
  };
  divisible_by_tp("heads", heads);
  divisible_by_tp("ffn_hidden", ffn_hidden);
  divisible_by_tp("vocab", vocab);
  query_group_violations(*this, tp, add);

  if (sequence_parallel && tp == 1)
    add("sequence_parallel", "true", "sequence parallelism requires tp > 1 (tp = 1)", {"tp"});
  // Sequence layout: CP holds 2 of 2*cp load-balanced chunks; SP splits each
  // CP rank's share of the sequence over TP.
  const std::vector<std::string> layout = {"cp", "tp", "sequence_parallel"};
  if (cp > 1 && seq % (2LL * cp) != 0) {
    add("seq", str(seq),
        "sequence length " + str(seq) + " is not divisible by 2*cp = " + str(2 * cp) +
            " (context-parallel load-balanced layout)",
        layout);
  } else if (sequence_parallel && tp > 1 && (seq / cp) % tp != 0) {
    add("seq", str(seq),
        "sequence length " + str(seq) + " is not divisible by " +
            (cp > 1 ? "cp*tp = " + str(cp * tp) : "tp = " + str(tp)) + " (sequence parallelism)",
        layout);
  }

  rotary_violations(*this, add);
  packing_violations(*this, cp, add);

  if (!(dropout >= 0.0 && dropout < 1.0)) add("dropout", str(dropout), "must be in [0, 1)");
  if (!(norm_eps > 0.0) || !std::isfinite(norm_eps)) add("norm_eps", str(norm_eps), "must be > 0");
  if (!(init_std > 0.0) || !std::isfinite(init_std)) add("init_std", str(init_std), "must be > 0");

  const bool full =
      recompute == RecomputeKind::full_uniform || recompute == RecomputeKind::full_block;
  const std::string mode(to_string(recompute));
  if (full && (recompute_layers < 1 || recompute_layers > layers)) {
    add("recompute_layers", str(recompute_layers),
        "must be in [1, " + str(layers) + "] (the number of layers) with recompute " + mode,
        {"layers", "recompute"});
  } else if (recompute == RecomputeKind::full_uniform && layers % recompute_layers != 0) {
    add("recompute_layers", str(recompute_layers),
        "must divide the number of layers " + str(layers) +
            " with recompute full-uniform (chunks of equal size)",
        {"layers", "recompute"});
  }
  if (recompute == RecomputeKind::selective && recompute_modules.empty())
    add("recompute_modules", "(empty)",
        "selective recompute needs at least one of core_attn, layernorm, mlp, moe");
  if (graph_warmup < 0) add("graph_warmup", str(graph_warmup), "must be >= 0");
  // Megatron: "recompute_granularity must not be full when CUDA Graphs are enabled"
  // (per-layer graphs; the checkpoint would wrap the graphed layers).
  if (full && graphs == GraphMode::per_layer)
    add("recompute", mode,
        "full recompute cannot be combined with per-layer graphs (as in Megatron: "
        "\"recompute_granularity must not be full when CUDA Graphs are enabled\"); use selective",
        {"graphs"});
  if (mtp_layers < 0) add("mtp_layers", str(mtp_layers), "must be >= 0");
  if (mtp_layers >= seq)
    add("mtp_layers", str(mtp_layers),
        "must be below the sequence length " + str(seq) +
            " (depth k predicts the token k+1 positions ahead)",
        {"seq"});
  if (mtp_repeated_layer && mtp_layers < 1)
    add("mtp_repeated_layer", "true", "needs mtp_layers >= 1 (a layer to repeat)", {"mtp_layers"});
  // parity runs the MTP depths eagerly, and a gradient hook is host code that a
  // replayed graph never runs.
  if (mtp_layers > 0 && graphs != GraphMode::none)
    add("mtp_layers", str(mtp_layers),
        "multi-token prediction runs eagerly in parity: needs graphs none", {"graphs"});
  if (observe_wgrad && graphs != GraphMode::none)
    add("observe_wgrad", "true",
        "weight-gradient sites are fed by gradient hooks, host code a replayed graph skips: "
        "needs graphs none",
        {"graphs"});
  moe_violations(*this, tp, ep, add);
  graph_scope_violations(*this, add);
  pipeline_violations(*this, add);
  return out;
}

std::int64_t ModelConfig::tokens_per_sequence() const {
  std::int64_t n = 0;
  for (std::int64_t l : packed_seq_lengths) n += l;
  return packed() ? n : seq;
}

PipelineLayoutConfig ModelConfig::pipeline_layout() const {
  PipelineLayoutConfig p = pipeline;
  p.num_layers = static_cast<int>(layers);
  p.mtp_layers = static_cast<int>(mtp_layers);
  return p;
}

void ModelConfig::validate(int tp, int cp, int dp, int ep) const {
  const std::vector<ModelConfigViolation> v = violations(tp, cp, dp, ep);
  if (!v.empty()) throw ModelConfigError(v.front().field, v.front().value, v.front().rule);
}

}  // namespace parity
