#include "harness/checks/tolerance.h"

namespace parity::checks {

namespace {
// Precision order, lowest first.
int rank_of(ModelDType d) {
  switch (d) {
    case ModelDType::bf16:
      return 0;
    case ModelDType::fp32:
      return 1;
    case ModelDType::fp64:
      return 2;
  }
  return 1;
}
}  // namespace

ModelDType computation_precision(const RunConfig& config) {
  const ModelDType residual = config.fp32_residual ? ModelDType::fp32 : config.dtype;
  return rank_of(residual) < rank_of(config.dtype) ? residual : config.dtype;
}

Tolerances tolerances_for(const RunConfig& config) {
  Tolerances t;
  t.precision = computation_precision(config);
  switch (t.precision) {
    case ModelDType::fp64:
      t.gradient = 1e-12;
      t.metric = 1e-10;
      t.backend = 1e-10;
      break;
    case ModelDType::fp32:
      t.gradient = 1e-6;
      t.metric = 1e-5;
      t.backend = 1e-5;
      break;
    case ModelDType::bf16:
      t.gradient = 1e-2;
      t.metric = 5e-2;
      t.backend = 2e-2;
      break;
  }
  t.basis = std::string(to_string(t.precision));
  if (t.precision != config.dtype)
    t.basis += " (" + std::string(to_string(config.dtype)) + " model, " +
               std::string(to_string(t.precision)) + " residual stream)";
  return t;
}

}  // namespace parity::checks
