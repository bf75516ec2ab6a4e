#include "harness/config/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace parity {
namespace {

double dtype_bytes(ModelDType d) {
  switch (d) {
    case ModelDType::fp64:
      return 8;
    case ModelDType::bf16:
      return 2;
    case ModelDType::fp32:
      break;
  }
  return 4;
}

std::optional<double> cgroup_limit() {
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

MemoryEstimate estimate_rank_memory(const RunConfig& c) {
  const double b = dtype_bytes(c.dtype);
  // A pipeline stage holds layers / pp on average, and the embedding and the
  // output layer sit on one stage each: per rank, the average over stages
  // (what per_rank() times the ranks adds up to).
  const double h = c.hidden, tp = c.tp, pp = std::max(1, c.pp);
  const double layers = double(c.layers) / pp;
  const double ffn = c.moe_experts > 0 && c.moe_ffn_hidden > 0 ? c.moe_ffn_hidden : c.ffn_hidden;
  const double fc1 = c.activation == ActivationKind::swiglu ? 2 * ffn : ffn;
  // Weights: attention (qkv + proj), the MLP (fc1, fc2) or this rank's experts.
  const double experts_here =
      c.moe_experts > 0 ? std::max(1.0, static_cast<double>(c.moe_experts) / c.ep) : 1.0;
  // linear_qkv: heads query heads and a key and a value per query group, each
  // head_dim wide; linear_proj: heads * head_dim back to h.
  const double heads = std::max(1, c.heads);
  const double groups = c.num_query_groups > 0 ? c.num_query_groups : heads;
  const double head_dim = c.kv_channels > 0 ? c.kv_channels : h / heads;
  const double attention = (2 * heads + 2 * groups) * head_dim * h;
  // Routed experts split over the expert TP group (--etp; tp by default).
  const double mlp_tp = c.moe_experts > 0 && c.etp > 0 ? c.etp : tp;
  const double layer_weights = attention / tp + experts_here * (fc1 + ffn) * h / mlp_tp;
  double weights = layers * layer_weights + c.vocab * h / tp * (c.untie ? 2 : 1) / pp;
  if (c.position_embedding == PositionEmbeddingKind::learned) weights += double(c.seq) * h / pp;
  MemoryEstimate e;
  e.parameters = 2 * b * weights;  // the weights and their gradients
  // One microbatch on this rank: a residual-sized tensor per layer kept for
  // backward, the MLP's hidden activation of one layer, and the logits.
  const double tokens = double(c.micro_batch) * c.seq / c.cp;
  e.activations =
      b * (layers * tokens * h + tokens * fc1 / tp + tokens * double(c.vocab) / tp / pp);
  return e;
}

std::optional<double> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  std::optional<double> available;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    double kb = 0;
    if (fields >> key >> kb && key == "MemAvailable:") available = kb * 1024;
  }
  if (const std::optional<double> limit = cgroup_limit())
    available = available ? std::min(*available, *limit) : *limit;
  return available;
}

std::string memory_text(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

std::vector<ConfigViolation> check_memory(const RunConfig& config, int ranks_here,
                                          bool single_rank_too, std::optional<double> available) {
  if (!available) return {};
  const MemoryEstimate sharded = estimate_rank_memory(config);
  double need = sharded.per_rank() * ranks_here;
  std::string what = std::to_string(ranks_here) + " rank(s) x " + memory_text(sharded.per_rank());
  if (single_rank_too) {
    RunConfig one = config;
    one.tp = one.cp = one.dp = one.ep = 1;
    one.etp = 0;
    one.clear_pipeline();
    one.microbatches = config.microbatches * config.dp;
    const double single = estimate_rank_memory(one).per_rank();
    if (single > need) {
      need = single;
      what = "the single-rank run " + memory_text(single);
    }
  }
  if (need <= *available) return {};
  // The size that weighs most names the violation.
  const bool ffn_heavier = config.ffn_hidden > config.hidden && config.ffn_hidden > config.vocab;
  const bool vocab_heavier = config.vocab > config.hidden && !ffn_heavier;
  const char* field = ffn_heavier ? "ffn-hidden" : vocab_heavier ? "vocab" : "hidden";
  const int value = ffn_heavier ? config.ffn_hidden : vocab_heavier ? config.vocab : config.hidden;
  return {{field, std::to_string(value),
           "the run needs at least " + memory_text(need) + " (" + what +
               ": weights and gradients, one microbatch's activations) and this machine has " +
               memory_text(*available) +
               " available: shrink hidden, ffn-hidden, vocab, layers or the batch, or shard over "
               "more ranks",
           ConfigViolation::Kind::number}};
}

}  // namespace parity
