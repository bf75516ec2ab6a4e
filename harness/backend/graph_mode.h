#pragma once
// How the model runs its graphed regions (docs/graph-phases.md): eagerly, one
// graph per transformer layer, or one graph of the whole forward/backward.
// Torch-free: RunConfig's --graphs field is this type.
#include <cstdint>

#include "harness/base/option_names.h"

namespace parity {

enum class GraphMode : std::int8_t { none, per_layer, full_iteration };
inline constexpr OptionNames<GraphMode, 3> kGraphModeNames{
    {{GraphMode::none, "none"},
     {GraphMode::per_layer, "per-layer"},
     {GraphMode::full_iteration, "full-iteration"}}};
static_assert(kGraphModeNames.complete());
constexpr const auto& option_names(GraphMode) { return kGraphModeNames; }
inline std::string_view to_string(GraphMode v) { return option_name(v); }

}  // namespace parity
