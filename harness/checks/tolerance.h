#pragma once
// The one rule every property's tolerance comes from (contract.md section 5,
// docs/properties.md "Tolerances"): tolerances follow the LOWEST precision the
// computation runs in. An fp64 model with an fp32 residual stream rounds like
// fp32, so it is judged with fp32 tolerances; bf16 stays bf16 whatever the
// residual stream.
#include <string>

#include "harness/config/run_config.h"

namespace parity::checks {

struct Tolerances {
  ModelDType precision = ModelDType::fp32;  // the lowest precision the computation runs in
  double gradient = 1e-6;  // recompute_invariance, graph_replay's later-step losses
  double metric = 1e-5;    // sharded_reduction
  // backend_parity: another backend against the reference (contract.md section 5:
  // fp64 1e-10, fp32 1e-5; bf16 2e-2, provisional until measured on a GPU,
  // docs/properties.md).
  double backend = 1e-5;
  // Why: "fp64" or "fp32 (fp64 model, fp32 residual stream)".
  std::string basis;
};

// The lowest of the model dtype and the residual stream's dtype.
ModelDType computation_precision(const RunConfig& config);
// fp64: gradient rel 1e-12, metric 1e-10, backend 1e-10; fp32: 1e-6, 1e-5, 1e-5;
// bf16: 1e-2, 5e-2, 2e-2.
Tolerances tolerances_for(const RunConfig& config);

}  // namespace parity::checks
