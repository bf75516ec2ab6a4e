#pragma once
// The model's enum options, each defined once with its spelling table (the
// CLI/JSON spelling): RunConfig's fields, the CLI, scenario files, the
// generators and ModelConfig all use these types. A new value is one enumerator
// and one table row here, plus the code that implements it (docs/extending.md).
// Torch-free.
#include <cstdint>

#include "harness/base/option_names.h"

namespace parity {

enum class ModelDType : std::int8_t { fp32, fp64, bf16 };
inline constexpr OptionNames<ModelDType, 3> kModelDTypeNames{
    {{ModelDType::fp32, "fp32"}, {ModelDType::fp64, "fp64"}, {ModelDType::bf16, "bf16"}}};

enum class NormKind : std::int8_t { layer_norm, rms_norm };
inline constexpr OptionNames<NormKind, 2> kNormKindNames{
    {{NormKind::layer_norm, "layernorm"}, {NormKind::rms_norm, "rmsnorm"}}};

enum class ActivationKind : std::int8_t { gelu, swiglu };
inline constexpr OptionNames<ActivationKind, 2> kActivationKindNames{
    {{ActivationKind::gelu, "gelu"}, {ActivationKind::swiglu, "swiglu"}}};

// Learned absolute position embeddings, or Megatron's rotary embedding
// (ModelConfig's rotary_* options).
enum class PositionEmbeddingKind : std::int8_t { learned, rope };
inline constexpr OptionNames<PositionEmbeddingKind, 2> kPositionEmbeddingKindNames{
    {{PositionEmbeddingKind::learned, "learned"}, {PositionEmbeddingKind::rope, "rope"}}};

// Activation recompute (Megatron's recompute_granularity / recompute_method):
//   full_uniform - consecutive chunks of recompute_layers layers, each chunk one checkpoint;
//   full_block   - the first recompute_layers layers each checkpointed, the rest plain;
//   selective    - the modules in recompute_modules (core_attn, layernorm, mlp, moe).
enum class RecomputeKind : std::int8_t { none, full_uniform, full_block, selective };
inline constexpr OptionNames<RecomputeKind, 4> kRecomputeKindNames{
    {{RecomputeKind::none, "none"},
     {RecomputeKind::full_uniform, "full-uniform"},
     {RecomputeKind::full_block, "full-block"},
     {RecomputeKind::selective, "selective"}}};

// MoE (docs/model.md "MoE layer"): the router's score function (Megatron's
// moe_router_score_function) and parity's forced routing for tests (applied to
// the routing only, never to what is observed).
enum class RouterScore : std::int8_t { softmax, sigmoid, sqrt_softplus };
inline constexpr OptionNames<RouterScore, 3> kRouterScoreNames{
    {{RouterScore::softmax, "softmax"},
     {RouterScore::sigmoid, "sigmoid"},
     {RouterScore::sqrt_softplus, "sqrt-softplus"}}};

enum class ForcedRouting : std::int8_t { none, random, biased };
inline constexpr OptionNames<ForcedRouting, 3> kForcedRoutingNames{
    {{ForcedRouting::none, "none"},
     {ForcedRouting::random, "random"},
     {ForcedRouting::biased, "biased"}}};

// The training step's optimizer (optimizer.h): plain SGD or Megatron's Adam.
enum class OptimizerKind : std::int8_t { sgd, adam };
inline constexpr OptionNames<OptimizerKind, 2> kOptimizerKindNames{
    {{OptimizerKind::sgd, "sgd"}, {OptimizerKind::adam, "adam"}}};

constexpr const auto& option_names(ModelDType) { return kModelDTypeNames; }
constexpr const auto& option_names(NormKind) { return kNormKindNames; }
constexpr const auto& option_names(ActivationKind) { return kActivationKindNames; }
constexpr const auto& option_names(PositionEmbeddingKind) { return kPositionEmbeddingKindNames; }
constexpr const auto& option_names(RecomputeKind) { return kRecomputeKindNames; }
constexpr const auto& option_names(RouterScore) { return kRouterScoreNames; }
constexpr const auto& option_names(ForcedRouting) { return kForcedRoutingNames; }
constexpr const auto& option_names(OptimizerKind) { return kOptimizerKindNames; }

static_assert(kModelDTypeNames.complete() && kNormKindNames.complete() &&
              kActivationKindNames.complete() && kPositionEmbeddingKindNames.complete() &&
              kRecomputeKindNames.complete() && kRouterScoreNames.complete() &&
              kForcedRoutingNames.complete() && kOptimizerKindNames.complete());

inline std::string_view to_string(ModelDType v) { return option_name(v); }
inline std::string_view to_string(NormKind v) { return option_name(v); }
inline std::string_view to_string(ActivationKind v) { return option_name(v); }
inline std::string_view to_string(PositionEmbeddingKind v) { return option_name(v); }
inline std::string_view to_string(RecomputeKind v) { return option_name(v); }
inline std::string_view to_string(RouterScore v) { return option_name(v); }
inline std::string_view to_string(ForcedRouting v) { return option_name(v); }
inline std::string_view to_string(OptimizerKind v) { return option_name(v); }

}  // namespace parity
