#include "harness/config/launch_mapping.h"

#include <nlohmann/json.hpp>

#include "harness/backend/registry.h"

namespace parity {

LaunchSpec launch_spec_from(const RunConfig& config, const LaunchOptions& options) {
  LaunchSpec spec;
  spec.tp = config.tp;
  spec.cp = config.cp;
  spec.dp = config.dp;
  spec.ep = config.ep;
  spec.pp = config.pp;
  spec.etp = config.etp;
  spec.mode = config.launch;
  spec.timeout_seconds = config.timeout;
  spec.faults = config.inject;
  spec.check_collectives = config.check_collectives;
  // The backend names its transport (reference: "gloo").
  spec.transport = std::string(make_backend(config.backend)->transport_name());
  spec.worker_executable = options.worker_executable;
  spec.getenv = options.getenv;
  spec.watcher = options.watcher;
  return spec;
}

std::vector<ConfigViolation> to_violations(const std::vector<LaunchProblem>& problems) {
  std::vector<ConfigViolation> out;
  out.reserve(problems.size());
  for (const LaunchProblem& p : problems)
    out.push_back({p.field, p.value, p.rule,
                   p.environment ? ConfigViolation::Kind::env : ConfigViolation::Kind::text});
  return out;
}

LaunchResult launch(const RunConfig& config, const std::string& program,
                    const LaunchOptions& options) {
  try {
    return launch(launch_spec_from(config, options), program, to_json(config));
  } catch (const LaunchSpecError& e) {
    throw ConfigError(to_violations(e.problems()));
  }
}

std::vector<ConfigViolation> validate_faults(const std::vector<std::string>& specs,
                                             int world_size) {
  return to_violations(fault_spec_problems(specs, world_size));
}

std::vector<ConfigViolation> read_env_rank(const RunConfig& config, EnvRank* out,
                                           const EnvReader& getenv) {
  return to_violations(read_env_rank(config.tp, config.cp, config.dp, out, getenv));
}

}  // namespace parity
