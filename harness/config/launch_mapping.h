#pragma once
// A RunConfig onto the launcher's terms: the LaunchSpec (layout, mode,
// timeout, faults, fingerprints, the backend's transport) and, as the rank
// program's opaque arguments, the RunConfig's JSON form (the model program
// reads it back with run_config_from_json). Launch problems come back as
// ConfigViolations, so callers report them like any other bad input.
#include <string>
#include <vector>

#include "harness/config/run_config.h"
#include "harness/runtime/launcher.h"

namespace parity {

// What a caller adds to a RunConfig for one launch.
struct LaunchOptions {
  // processes: the worker executable; "" = this executable. Tests point it at
  // the parity binary.
  std::string worker_executable;
  // env: how environment variables are read (tests substitute a map).
  EnvReader getenv;
  // Watches the ranks while they run (launch_spec.h; not in env mode).
  RunWatcher watcher;
};

LaunchSpec launch_spec_from(const RunConfig& config, const LaunchOptions& options = {});

// launch(launch_spec_from(config, options), program, to_json(config)); a
// LaunchSpecError is rethrown as ConfigError.
LaunchResult launch(const RunConfig& config, const std::string& program,
                    const LaunchOptions& options = {});

// The runtime's problems as violations: environment variables as Kind::env,
// spec fields (inject) as Kind::text.
std::vector<ConfigViolation> to_violations(const std::vector<LaunchProblem>& problems);

// The `inject` rules of validate_run_config.
std::vector<ConfigViolation> validate_faults(const std::vector<std::string>& specs, int world_size);

// Env mode: this process's rank (harness/runtime/env_rank.h) for `config`'s layout.
std::vector<ConfigViolation> read_env_rank(const RunConfig& config, EnvRank* out,
                                           const EnvReader& getenv = {});

}  // namespace parity
