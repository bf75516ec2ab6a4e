#pragma once
// Where each RunConfig value came from: the built-in default, the
// embedded default scenario of `parity check`, a scenario file, or the command
// line. A violation about a value the user did not type names its source and
// how to override it: `--sp: sequence parallelism requires tp > 1 (tp = 1)
// (the embedded default sets --sp; pass --no-sp)`.
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "harness/config/run_config.h"

namespace parity {

enum class ValueOrigin { built_in_default, embedded_default, scenario_file, command_line };

struct ValueSource {
  ValueOrigin origin = ValueOrigin::built_in_default;
  std::string file;  // scenario_file: its path
};

class ValueSources {
 public:
  void set(const std::string& key, ValueSource source) { by_key_[key] = std::move(source); }
  // The built-in default when nothing was recorded for `key`.
  ValueSource of(const std::string& key) const;

  // Every key of `config` that differs from RunConfig{} came from `source`
  // (the embedded default scenario sets only some keys to its own values).
  void set_differing(const RunConfig& config, const ValueSource& source);
  // Every key present in `scenario` (a scenario file's run options) came from it.
  void set_present(const nlohmann::json& scenario, const ValueSource& source);

 private:
  std::map<std::string, ValueSource> by_key_;
};

// One line: format_for_file when the violated value came from a scenario file,
// else format_for_cli; then, in parentheses, where the values the user did not
// type came from and the flag that overrides them. `config` supplies the
// values of the other keys the rule reads.
std::string describe_violation(const ConfigViolation& v, const ValueSources& sources,
                               const RunConfig& config);

}  // namespace parity
