#pragma once
// RunConfig (the CLI flags / scenario keys) -> ModelConfig (what GPTModel is
// built from). The one mapping; validation stays in validate_run_config, whose
// rules imply ModelConfig::validate for every mapped config (tested).
#include <vector>

#include "harness/config/run_config.h"
#include "harness/model/model_config.h"
#include "harness/observation/source_kind.h"

namespace parity {

// Every model field the run configures (recompute and graph phases included).
// Call on a validated config.
ModelConfig model_config_from(const RunConfig& config);

// The source kinds the model announces observation sites for: a metric of any
// other kind would compare nothing. Every configuration has the first-wave
// kinds; MoE layers add router_logits and router_scores, and
// router_diagnostics where whole sequences are local (no SP x TP, no CP). No
// MTP head.
KindSet model_source_kinds(const RunConfig& config);

}  // namespace parity
