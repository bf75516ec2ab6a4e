#pragma once
// The one table of RunConfig's fields: key (= CLI flag without dashes = JSON
// key), type, help text, range rule and accessors. Equality, to/from JSON, the
// key list, the range checks and the CLI's flags are all driven by it, so a new
// field is one row (run_config_fields.cpp).
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "harness/config/run_config.h"

namespace parity {

enum class FieldType {
  integer,    // int: "--tp 2"
  seed,       // std::uint64_t, non-negative
  real,       // double
  flag,       // bool: "--sp" / "--no-sp" on the command line
  text,       // free text: paths, the recompute spec
  choice,     // one of a few spellings (choices())
  text_list,  // repeatable (--inject) or comma-separated (--metrics)
};

// A closed or open interval for numeric fields; `rule` is its text for people.
struct NumericRange {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;
  std::string_view rule;  // "must be >= 1", "must be in [0, 1)"
  bool contains(double v) const;
};

struct RunConfigField {
  std::string_view key;
  FieldType type = FieldType::integer;
  std::string_view group;  // help section
  std::string_view help;
  std::optional<NumericRange> range;   // numbers only
  std::string (*choices)() = nullptr;  // choice: "a, b, c"
  bool comma_separated = false;        // text_list: "a,b" (else repeatable)
  std::string_view value_name;         // text, text_list: what --help calls the value ("FILE")
  std::function<nlohmann::json(const RunConfig&)> get;
  // Throws ConfigParseError naming the key and value on a wrong type or spelling.
  std::function<void(RunConfig&, const nlohmann::json&)> set;
};

// Every field, in flag order.
const std::vector<RunConfigField>& run_config_fields();
// nullptr when unknown.
const RunConfigField* find_run_config_field(std::string_view key);
// `unknown key "microbatchs": did you mean "microbatches"? (parity list options
// lists the 64 keys)`: a typo is named with its nearest keys, not with all of them.
std::string unknown_run_config_key(std::string_view key);

// What --help shows after the flag: INT, UINT, FLOAT, {a,b,c} for a choice,
// the field's value_name (or TEXT) for text; empty for a flag.
std::string help_type_name(const RunConfigField& field);

// A command-line value (text as typed; a list's items) as the field's JSON
// value. nullopt with `rule` set when the text is not of the field's type
// ("expected an integer", "must be a non-negative integer").
std::optional<nlohmann::json> field_value_from_text(const RunConfigField& field,
                                                    const std::vector<std::string>& texts,
                                                    std::string* rule);

// The value as a person types it: 2, 0.1, per-layer, true, a,b.
std::string field_value_text(const nlohmann::json& value);

}  // namespace parity
