#include "harness/observation/source_kind.h"

#include <array>

namespace parity {
namespace {
constexpr std::array<std::string_view, kSourceKindCount> kNames{
    "residual_accumulator", "residual_contribution", "output_logits",   "attention_context",
    "mlp_output",           "router_logits",         "router_scores",   "router_diagnostics",
    "mtp_logits",           "layernorm_output",      "weight_gradient",
};
}  // namespace

std::string_view to_string(SourceKind kind) { return kNames[static_cast<std::size_t>(kind)]; }

std::optional<SourceKind> source_kind_from_string(std::string_view name) {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<SourceKind>(i);
  return std::nullopt;
}

}  // namespace parity
