#pragma once
// RunConfig (the CLI flags / scenario keys) -> ModelConfig (what GPTModel is
// built from). The one mapping; validation stays in validate_run_config, whose
// rules imply ModelConfig::validate for every mapped config (tested).
#include <vector>

#include "harness/config/run_config.h"
#include "harness/model/model_config.h"

namespace parity {

// Every model field the run configures (recompute and graph phases included).
// Call on a validated config.
ModelConfig model_config_from(const RunConfig& config);

}  // namespace parity
