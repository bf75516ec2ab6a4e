#pragma once
// RunConfig (the CLI flags / scenario keys) -> ModelConfig (what GPTModel is
// built from). The one mapping; validation stays in validate_run_config, whose
// rules imply ModelConfig::validate for every mapped config (tested).
#include <vector>

#include "harness/config/run_config.h"
#include "harness/model/model_config.h"

namespace parity {

// Every model field the run configures. Call on a validated config.
ModelConfig model_config_from(const RunConfig& config);

// The RunConfig options that this build's model cannot honour yet, one
// violation each (field, value, "not supported by the model yet ..."), so a run
// asking for them is refused with exit 2 instead of silently running without
// them. Empty once the model implements every option.
std::vector<ConfigViolation> unsupported_model_options(const RunConfig& config);

}  // namespace parity
