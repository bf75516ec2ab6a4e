#pragma once
// The run options on a CLI11 subcommand, one per RunConfig field (the field
// table in harness/config/run_config_fields.h): every boolean also has its
// negative spelling (--sp / --no-sp), every value is read as text and mapped by
// the table, so a bad value is a ConfigViolation naming the flag.
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/run_config.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace parity::cli {

// What CLI11 writes into for one subcommand (one entry per field; a deque so
// the addresses CLI11 keeps stay valid).
struct RunOptionValues {
  std::deque<std::string> texts;
  std::deque<std::vector<std::string>> lists;
  std::deque<bool> flags;
  std::vector<CLI::Option*> options;
};

// Adds every field's flag (or only the keys in `only`, when not empty; the
// others keep a null entry in values.options); `shown` supplies the defaults
// the help prints.
void add_run_options(CLI::App* app, RunOptionValues& values, const RunConfig& shown,
                     const std::vector<std::string_view>& only = {});

// The options given on the command line, as RunConfig JSON (key -> value). A
// value that is not of its field's type is left out and reported in `violations`.
nlohmann::json given_run_options(const RunOptionValues& values,
                                 std::vector<ConfigViolation>* violations);

}  // namespace parity::cli
